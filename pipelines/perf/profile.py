"""The perf profile: what the static reading found (any host) and, on a GPU, the baseline's measurements, the
compiled kernels' facts, the bound against the copy ceiling measured in the same run, and Nsight Compute's sections.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from pipelines.perf import catalogue
from pipelines.perf.report import facts_table
from pipelines.perf.source import KernelSource


@dataclass(frozen=True)
class Size:
    rows: int
    hidden: int

    @property
    def key(self) -> str:
        return f"{self.rows}x{self.hidden}"

    @classmethod
    def parse(cls, text: str) -> Size:
        from pipelines.outcome import PipelineError

        rows, sep, hidden = text.lower().partition("x")
        if not sep or not rows.isdigit() or not hidden.isdigit() or int(rows) < 1 or not 1 <= int(hidden) <= 65536:
            raise PipelineError(f"--size {text!r} is not ROWSxHIDDEN", hint="for example --size 4096x16384")
        return cls(int(rows), int(hidden))

    def to_json(self) -> dict:
        return {"key": self.key, "rows": self.rows, "hidden": self.hidden}


def benchmark_sizes(source: KernelSource) -> list[Size]:
    hidden = int(source.sweep.model_config.get("hidden_size", 4096))
    return [Size(x, hidden) for x in source.sweep.x_values]


def applicability(text: str) -> list[dict]:
    """Which catalogue entries apply to this kernel, and why not where they do not (no GPU needed)."""
    rows = []
    for entry in catalogue.CATALOGUE:
        try:
            entry.rewrite(text, entry.params)
            rows.append({"variant": entry.title, "key": entry.key, "applies": True, "why": entry.hypothesis})
        except catalogue.NotApplicable as exc:
            rows.append({"variant": entry.title, "key": entry.key, "applies": False, "why": str(exc)})
    return rows


@dataclass
class PerfProfile:
    source: KernelSource
    sizes: list[Size]
    target_sizes: list[Size]
    target_pass: str
    catalogue: list[dict] = field(default_factory=list)
    measured: dict = field(default_factory=dict)  # the baseline child's JSON (times, facts, bytes, copy_gbps)
    ncu: dict = field(default_factory=dict)
    script_csv: str = ""  # the benchmark script's own CSV, when it ran

    def to_json(self) -> dict:
        return {
            "kernel": self.source.name,
            "source": self.source.to_json(),
            "sizes": [s.key for s in self.sizes],
            "target_sizes": [s.key for s in self.target_sizes],
            "target_pass": self.target_pass,
            "catalogue": self.catalogue,
            "measured": self.measured,
            "ncu": self.ncu,
            "bound": self.bound(),
        }

    def bound(self) -> dict:
        """Per pass and size: GB/s of the bytes the kernels touch, as a share of the copy ceiling of this run."""
        copy = self.measured.get("copy_gbps")
        times = self.measured.get("times", {}).get("liger", {})
        touched = self.measured.get("bytes", {})
        if not copy or not times:
            return {}
        out: dict = {}
        for pass_name, by_size in times.items():
            for size, ms in by_size.items():
                n_bytes = touched.get(size, {}).get(pass_name)
                if n_bytes:
                    gbps = n_bytes / (ms * 1e-3) / 1e9
                    out.setdefault(pass_name, {})[size] = {"gbps": round(gbps), "pct_copy": round(100 * gbps / copy)}
        return out

    def classification(self) -> str:
        bound = self.bound().get(self.target_pass, {})
        shares = [bound[s.key]["pct_copy"] for s in self.target_sizes if s.key in bound]
        if not shares:
            return "not measured (no GPU)"
        worst = min(shares)
        if worst >= 70:
            return f"memory-bound: {worst}% of the copy ceiling at the target sizes; little left but fewer bytes"
        return (
            f"latency / occupancy-bound: {worst}% of the copy ceiling at the target sizes (a row-wise norm moves "
            "each byte once, so the gap is in flight, not in math)"
        )

    def to_markdown(self) -> str:
        s = self.source
        lines = [
            f"## perf profile: `{s.name}`",
            "",
            f"- kernel: `{s.files.ops}` ({s.lines} lines)",
            f"- benchmark: `{s.files.benchmark}` (setup `{s.sweep.setup_fn}`, providers "
            f"{', '.join(f'`{p}`' for p in s.sweep.providers)}; Liger `{s.sweep.liger_provider}`, reference "
            f"`{s.sweep.reference_provider}`; {s.sweep.x_name} sweep on `{s.sweep.model}`)",
            f"- unit tests: `{s.files.test}` ({', '.join(s.tests)})",
            f"- sizes (rows x hidden): {', '.join(x.key for x in self.sizes)}; target: "
            f"{', '.join(x.key for x in self.target_sizes)}, pass `{self.target_pass}`",
            f"- bound: {self.classification()}",
            "",
            "### @triton.jit functions",
            "",
            "| function | line | constexpr parameters |",
            "|---|---|---|",
        ]
        lines += [f"| `{j.name}` | {j.line} | {', '.join(j.constexprs)} |" for j in s.jit_functions]
        lines += ["", "### Launches", "", "| kernel | line | launched by | grid | settings |", "|---|---|---|---|---|"]
        for launch in s.launches:
            settings = ", ".join(f"{k}={v}" for k, v in launch.settings.items())
            lines.append(f"| `{launch.kernel}` | {launch.line} | `{launch.caller}` | `{launch.grid}` | {settings} |")
        lines += ["", "Launch parameters set by:", ""] + [f"- `{c}`" for c in s.settings_calls]
        lines += ["", "### Catalogue", "", "| variant | applies | why |", "|---|---|---|"]
        for row in self.catalogue:
            lines.append(f"| {row['variant']} | {'yes' if row['applies'] else 'no'} | {row['why']} |")
        facts = self.measured.get("facts") or []
        if facts:
            lines += ["", "### Compiled kernels", "", facts_table(facts)]
        bound = self.bound()
        if bound:
            lines += ["", f"### Bound (copy ceiling {self.measured['copy_gbps']:.0f} GB/s, same run)", ""]
            lines += ["| pass | size | GB/s | % of copy |", "|---|---|---|---|"]
            for pass_name, by_size in bound.items():
                for size, row in by_size.items():
                    lines.append(f"| {pass_name} | {size} | {row['gbps']} | {row['pct_copy']}% |")
        if self.ncu:
            lines += ["", "### Nsight Compute", ""]
            if "error" in self.ncu:
                lines.append(f"not read: {self.ncu['error']}")
            for kernel, metrics in self.ncu.get("kernels", {}).items():
                lines.append(f"- `{kernel}`: " + "; ".join(f"{k} {v}" for k, v in metrics.items()))
        return "\n".join(lines) + "\n"
