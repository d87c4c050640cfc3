"""The PR body in the target's own shape: its `.github/pull_request_template.md` filled, when it has one.

The template's `## ` sections are kept in its order and each gets what the pipeline has for it (Summary, Details,
Testing Done; a section we have nothing for keeps the template's text); HTML comments (the template's instructions
to a human) are dropped. Its checklist is ticked only for what a gate ran and passed, and says which gate that was;
`<BLANK>` in "Hardware Type" becomes the host the gates ran on. Without a template the sections follow one another.
Every body ends with the versions it was made with and the command that makes it again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.target import Checkout

TEMPLATE = ".github/pull_request_template.md"
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CHECK = re.compile(r"^- \[ \] run `make ([\w-]+)`(.*)$")


@dataclass(frozen=True)
class BodyParts:
    """What a pipeline says in its PR, by the template's section names."""

    summary: str
    details: str
    testing: str  # the gates table and what it means
    gates: tuple[GateResult, ...]
    make_targets: Mapping[str, tuple[str, ...]]  # `make X` -> the gates that stand for it (all must PASS)
    reproduce: str  # the liger-bot command line


def body(checkout: Checkout, parts: BodyParts, versions: Mapping[str, str], host: str | None = None) -> str:
    """`host`: the hardware the gates ran on (default: this host's, as `hardware()` finds it)."""
    template = checkout.path(TEMPLATE)
    text = _filled(template.read_text(), parts, host or hardware()) if template.is_file() else _plain(parts)
    versions = {**versions, "target": target_version(checkout)}
    return f"{text.rstrip()}\n\n{_versions(versions)}\n\n{_reproduce(parts.reproduce)}\n"


def target_version(checkout: Checkout) -> str:
    """The target's own version, as its pyproject.toml states it (Liger-Kernel: `version = "0.8.5"`)."""
    pyproject = checkout.path("pyproject.toml")
    text = pyproject.read_text() if pyproject.is_file() else ""
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M)
    return f"{name.group(1) if name else checkout.root.name} {found.group(1) if found else '(no version)'}"


def _plain(parts: BodyParts) -> str:
    return "\n\n".join(["## Summary", parts.summary, "## Details", parts.details, "## Testing Done", parts.testing])


def _filled(template: str, parts: BodyParts, host: str) -> str:
    ours = {"summary": parts.summary, "details": parts.details, "testing done": parts.testing}
    text = _COMMENT.sub("", template)
    sections = re.split(r"^(## .+)$", text, flags=re.M)
    out, seen = [sections[0].strip()], set()
    for heading, content in zip(sections[1::2], sections[2::2], strict=True):
        name = heading[3:].strip().lower()
        seen.add(name)
        filled = ours.get(name)
        rest = _checklist(content, parts, host) if name == "testing done" else ("" if filled else content.strip())
        out.append("\n\n".join(p for p in (heading, filled, rest) if p))
    if "details" not in seen:  # Liger's template comments its Details section out: ours goes after the Summary
        at = next((i for i, s in enumerate(out) if s.lower().startswith("## summary")), 0) + 1
        out.insert(at, f"## Details\n\n{parts.details}")
    return "\n\n".join(s for s in out if s)


def _checklist(content: str, parts: BodyParts, host: str) -> str:
    status = {g.name: g.status for g in parts.gates}
    lines = []
    for line in content.strip().splitlines():
        line = line.replace("<BLANK>", host)
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


def versions() -> dict[str, str]:
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
