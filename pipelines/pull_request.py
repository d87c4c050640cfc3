"""The PR body, built once from the parts a pipeline returns: its target's own PR template filled, when it has one.

A pipeline says what it has (`BodyParts`: Summary, Details, what Testing Done shows beside the gates, which gates
stand for which `make` target, the reproduce command) and `for_target` adds what its checkout and environment say
(the template's text, the target's version, the package versions, the host), all while the stage runs. `render`
makes the body from those parts and the verify `Report` wherever it is needed: the CLI's body file, the App's PR
(with its notes: the provider's explanation, who asked), again after a GPU runner's gates were merged in. Nothing
appends to a rendered body or looks inside one.

The template's `## ` sections are kept in its order and each gets what the pipeline has for it (Summary, Details,
Testing Done; a section we have nothing for keeps the template's text); HTML comments (the template's instructions
to a human) are dropped. Its checklist is ticked only for what a gate ran and passed, and says which gate that was;
`<BLANK>` in "Hardware Type" becomes the host the gates ran on. Without a template the sections follow one another.
Every body ends with the versions it was made with and the command that makes it again. The title is the PR's,
never repeated in the body.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines.outcome import GateStatus
from pipelines.outcome import Report
from pipelines.target import Checkout

TEMPLATE = ".github/pull_request_template.md"
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CHECK = re.compile(r"^- \[ \] run `make ([\w-]+)`(.*)$")


@dataclass(frozen=True)
class BodyParts:
    """What a pipeline says in its PR, by the template's section names, and what its target and host add."""

    summary: str
    details: str = ""
    testing: str = ""  # what Testing Done shows after the gates table (a benchmark)
    make_targets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # `make X` -> its gates (all PASS)
    reproduce: str = ""  # the liger-bot command line
    # from the target's checkout and this environment (for_target), so the body renders without either
    template: str = ""  # the target's `.github/pull_request_template.md`; "": it has none
    target: str = ""  # the target's name and version, e.g. "liger_kernel 0.8.5"
    versions: Mapping[str, str] = field(default_factory=dict)
    host: str = ""  # the hardware the gates ran on

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        return {**data, "make_targets": {k: list(v) for k, v in self.make_targets.items()}}

    @classmethod
    def from_json(cls, data: Mapping) -> BodyParts:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        targets = {k: tuple(v) for k, v in (data.get("make_targets") or {}).items()}
        return cls(**{**data, "make_targets": targets, "versions": dict(data.get("versions") or {})})


def for_target(
    checkout: Checkout, parts: BodyParts, versions: Mapping[str, str] | None = None, host: str | None = None
) -> BodyParts:
    """`parts` with the checkout's template and version, the installed versions and this host (or those given)."""
    template = checkout.path(TEMPLATE)
    return dataclasses.replace(
        parts,
        template=template.read_text() if template.is_file() else "",
        target=target_version(checkout),
        versions=dict(installed_versions() if versions is None else versions),
        host=host or hardware(),
    )


def render(parts: BodyParts, report: Report, notes: Sequence[str] = ()) -> str:
    """The body: the template filled (or the sections plainly), `notes` (the App's: explanation, who asked), the
    versions and the reproduce command."""
    verify = ("### Verify", report.table()) if report.gates else ()
    testing = "\n\n".join(p for p in (*verify, parts.testing.strip()) if p)
    text = _filled(parts, testing, report) if parts.template else _plain(parts, testing)
    tail = [*(n.strip() for n in notes if n.strip())]
    if parts.versions or parts.target:
        tail.append(_versions({**parts.versions, "target": parts.target or "(unknown)"}))
    if parts.reproduce:
        tail.append(_reproduce(parts.reproduce))
    return "\n\n".join([text.rstrip(), *tail]) + "\n"


def body(checkout: Checkout, parts: BodyParts, report: Report, versions=None, host: str | None = None) -> str:
    """`render` of `parts` for `checkout` (for_target): what a pipeline writes beside the checkout."""
    return render(for_target(checkout, parts, versions, host), report)


def handoff(title: str, branch: str, body_file: Path | str) -> str:
    """The command that opens the PR from a CLI run, with the body file the run wrote."""
    argv = ["gh", "pr", "create", "--draft", "--head", branch, "--title", title, "--body-file", str(body_file)]
    return "open the PR: " + shlex.join(argv)


def target_version(checkout: Checkout) -> str:
    """The target's own version, as its pyproject.toml states it (Liger-Kernel: `version = "0.8.5"`)."""
    pyproject = checkout.path("pyproject.toml")
    text = pyproject.read_text() if pyproject.is_file() else ""
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M)
    return f"{name.group(1) if name else checkout.root.name} {found.group(1) if found else '(no version)'}"


def _plain(parts: BodyParts, testing: str) -> str:
    """No template of the target's: our sections, the hardware as Liger's template asks for it."""
    testing = f"{testing.strip()}\n\nHardware Type: {parts.host}" if parts.host else testing
    sections = [("Summary", parts.summary), ("Details", parts.details), ("Testing Done", testing)]
    return "\n\n".join(f"## {name}\n\n{text.strip()}" for name, text in sections if text.strip())


def _filled(parts: BodyParts, testing: str, report: Report) -> str:
    ours = {"summary": parts.summary, "details": parts.details, "testing done": testing}
    text = _COMMENT.sub("", parts.template)
    sections = re.split(r"^(## .+)$", text, flags=re.M)
    out, seen = [sections[0].strip()], set()
    for heading, content in zip(sections[1::2], sections[2::2], strict=True):
        name = heading[3:].strip().lower()
        seen.add(name)
        filled = ours.get(name)
        rest = _checklist(content, parts, report) if name == "testing done" else ("" if filled else content.strip())
        out.append("\n\n".join(p for p in (heading, filled, rest) if p))
    if "details" not in seen and parts.details:  # Liger's template comments its Details out: ours follows Summary
        at = next((i for i, s in enumerate(out) if s.lower().startswith("## summary")), 0) + 1
        out.insert(at, f"## Details\n\n{parts.details}")
    return "\n\n".join(s for s in out if s)


def _checklist(content: str, parts: BodyParts, report: Report) -> str:
    status = {g.name: g.status for g in report.gates}
    lines = []
    for line in content.strip().splitlines():
        line = line.replace("<BLANK>", parts.host or "(not recorded)")
        match = _CHECK.match(line.strip())
        if match:
            target = match.group(1)
            stand_ins = parts.make_targets.get(target, ())
            passed = bool(stand_ins) and all(status.get(g) is GateStatus.PASS for g in stand_ins)
            said = f" (liger-bot: {', '.join(stand_ins)})" if stand_ins else " (not run by liger-bot)"
            line = f"- [{'x' if passed else ' '}] run `make {target}`{match.group(2)}{said}"
        lines.append(line)
    return "\n".join(lines)


def hardware() -> str:
    """The host the gates ran on: its GPU, else the CPU with Triton's interpreter (the GPU gates then say SKIP)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "CPU only (TRITON_INTERPRET=1; the GPU gates SKIP and say so)"


def installed_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version

    found = {}
    for package in ("liger-bot", "transformers", "torch", "triton"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def _versions(versions: Mapping[str, str]) -> str:
    rows = "\n".join(f"| {name} | {value} |" for name, value in versions.items())
    return f"<details><summary>Versions</summary>\n\n| package | version |\n|---|---|\n{rows}\n\n</details>"


def _reproduce(command: str) -> str:
    return f"<details><summary>Reproduce</summary>\n\n```bash\n{command}\n```\n\n</details>"


def source_link(evidence_file: str, lines: tuple[int, int], transformers_version: str) -> str:
    """A permalink to the HF source at the exact transformers release (`transformers/...` under site-packages)."""
    first, last = lines
    anchor = f"#L{first}" + (f"-L{last}" if last != first else "")
    return f"https://github.com/huggingface/transformers/blob/v{transformers_version}/src/{evidence_file}{anchor}"
