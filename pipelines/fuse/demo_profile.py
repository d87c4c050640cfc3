"""`liger-bot demo recsys --profile DIR`: where the demo's step time goes, per variant, under torch.profiler.

The same model, batches and train step as `demo.run` (pipelines/fuse/recsys.py), three variants: nn.EmbeddingBag
eager, EmbeddingBag under torch.compile, the naive loop compiled with our pass. Each is warmed up (compiled) first,
then `steps` steps run under the profiler, each step synced so the wall per step is the step's own. Written to DIR:
profile.json and profile.md with, per variant, the wall per step, the device busy time per step (the union of the
kernel intervals; wall minus busy is the time the GPU waited on the host), kernel launches per step, the top
kernels (count, total us) and the host ops with the most self CPU time per step. On a CPU host only CPU activity is recorded: the top ops by self CPU time instead.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from pipelines.fuse import recsys
from pipelines.fuse.runtime import pooling

TOP = 12
LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
# a host read of a device value (the custom ops' offsets checks do one per call): each one drains the GPU queue.
# `.tolist()` dispatches no aten op: on CUDA it shows as cudaMemcpyAsync (DtoH) + cudaStreamSynchronize; the step's
# own sync after each step counts once (cudaDeviceSynchronize). Host-to-device copies are cudaMemcpyAsync too.
SYNC_NAMES = (
    "aten::_local_scalar_dense",
    "aten::item",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
)


def _variants(device: str, inner: str):
    from pipelines.fuse.runtime import compile as fuse_compile

    size = recsys.DemoSize.for_device(device)
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).to(device)
    bag = recsys.EmbeddingBagEncoder(size).to(device)
    bag.load_state_dict(base.state_dict())
    yield "embedding_bag_eager", lambda: copy.deepcopy(bag), size
    yield "embedding_bag_compiled", lambda: torch.compile(copy.deepcopy(bag), backend=inner, dynamic=True), size
    yield "our_pass", lambda: fuse_compile(copy.deepcopy(base), inner=inner), size


def _union_us(intervals: list[tuple[float, float]]) -> float:
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy


def _summarise(prof, steps: int, wall_ms: list[float], device: str) -> dict:
    events = [e for e in prof.events() if e.time_range.end > e.time_range.start]
    wall = sum(wall_ms) / len(wall_ms)
    result = {"steps": steps, "wall_ms_per_step": round(wall, 4), "wall_ms_each": [round(w, 4) for w in wall_ms]}
    syncs = {name: sum(1 for e in events if e.name == name) / steps for name in SYNC_NAMES}
    result["host_reads_per_step"] = {name: count for name, count in syncs.items() if count}
    if device == "cuda":
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = _union_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1e3 / steps
        launches = sum(1 for e in events if e.name in LAUNCH_NAMES) / steps
        table: dict[str, list[float]] = {}
        for e in kernels:
            row = table.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += e.time_range.elapsed_us()
        rows = sorted(table.items(), key=lambda kv: -kv[1][1])[:TOP]
        result.update(
            gpu_busy_ms_per_step=round(busy, 4),
            host_gap_ms_per_step=round(wall - busy, 4),
            device_events_per_step=round(len(kernels) / steps, 2),
            kernel_launches_per_step=round(launches, 2),
            top=[{"name": n[:90], "count": int(c), "total_us": round(t, 1)} for n, (c, t) in rows],
            host_top=_host_top(prof, steps),
        )
    else:
        averages = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:TOP]
        result.update(
            cpu_ops_per_step=round(len(events) / steps, 2),
            top=[
                {"name": a.key[:90], "count": int(a.count), "total_us": round(a.self_cpu_time_total, 1)}
                for a in averages
            ],
        )
    return result


def _host_top(prof, steps: int) -> list[dict]:
    """The host side of a CUDA step: the ops and runtime calls with the most self CPU time, per step, so a host-bound
    step (wall far above GPU busy) says where its host time goes (dispatch, Triton's launcher, guards, the optimizer)."""
    averages = [a for a in prof.key_averages() if a.self_cpu_time_total > 0]
    averages.sort(key=lambda a: -a.self_cpu_time_total)
    return [
        {
            "name": a.key[:90],
            "calls_per_step": round(a.count / steps, 2),
            "self_us_per_step": round(a.self_cpu_time_total / steps, 1),
            "total_us_per_step": round(a.cpu_time_total / steps, 1),
        }
        for a in averages[:TOP]
    ]


def profile(device: str, steps: int, out_dir: Path, inner: str | None = None, warmup: int = 3) -> dict:
    """Profile the three variants; writes out_dir/profile.json and profile.md; returns the json's dict."""
    if device == "cpu" and not pooling.interpreter_active():
        return _in_interpreter(steps, out_dir, inner, warmup)
    from torch.profiler import ProfilerActivity

    inner = inner or ("inductor" if device == "cuda" else "aot_eager")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, warmup + steps, device)
    report = {"device": device, "compiler": inner, "torch": torch.__version__, "variants": {}}
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
    for name, build, _ in _variants(device, inner):
        torch._dynamo.reset()
        model = build()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        for batch in data[:warmup]:
            recsys.train_step(model, optimizer, batch)
        recsys._sync(device)
        wall_ms = []
        with torch.profiler.profile(activities=activities) as prof:
            for batch in data[warmup:]:
                recsys._sync(device)
                start = time.perf_counter()
                recsys.train_step(model, optimizer, batch)
                recsys._sync(device)
                wall_ms.append((time.perf_counter() - start) * 1e3)
        report["variants"][name] = _summarise(prof, steps, wall_ms, device)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "profile.md").write_text(to_markdown(report))
    return report


def to_markdown(report: dict) -> str:
    cuda = report["device"] == "cuda"
    lines = [f"# recsys demo profile ({report['device']}, {report.get('gpu', 'cpu')}, torch {report['torch']})", ""]
    if cuda:
        lines += [
            "| variant | wall ms/step | GPU busy ms/step | host gap ms/step | launches/step | device events/step | host reads/step |"
        ]
        lines += ["|---|---|---|---|---|---|---|"]
        for name, v in report["variants"].items():
            lines.append(
                f"| {name} | {v['wall_ms_per_step']} | {v['gpu_busy_ms_per_step']} | {v['host_gap_ms_per_step']} "
                f"| {v['kernel_launches_per_step']} | {v['device_events_per_step']} | {_reads(v)} |"
            )
    else:
        lines += ["| variant | wall ms/step | CPU ops/step | host reads/step |", "|---|---|---|---|"]
        for name, v in report["variants"].items():
            lines.append(f"| {name} | {v['wall_ms_per_step']} | {v['cpu_ops_per_step']} | {_reads(v)} |")
    for name, v in report["variants"].items():
        lines += ["", f"## {name}: top {'kernels' if cuda else 'ops (self CPU)'}", "", "| name | count | total us |"]
        lines += ["|---|---|---|"] + [f"| `{r['name']}` | {r['count']} | {r['total_us']} |" for r in v["top"]]
        if v.get("host_top"):
            lines += ["", f"## {name}: host time per step (self CPU)", ""]
            lines += ["| name | calls/step | self us/step | total us/step |", "|---|---|---|---|"]
            lines += [
                f"| `{r['name']}` | {r['calls_per_step']:g} | {r['self_us_per_step']} | {r['total_us_per_step']} |"
                for r in v["host_top"]
            ]
    return "\n".join(lines) + "\n"


def _reads(variant: dict) -> str:
    return ", ".join(f"{name} {count:g}" for name, count in variant["host_reads_per_step"].items()) or "0"


def _in_interpreter(steps: int, out_dir: Path, inner: str | None, warmup: int) -> dict:
    """On a CPU host our pass's kernels need Triton's interpreter, set before triton is imported: a child."""
    command = [sys.executable, "-m", "pipelines.fuse.demo_profile", "--device", "cpu", "--steps", str(steps)]
    command += ["--out", str(out_dir), "--warmup", str(warmup)] + (["--inner", inner] if inner else [])
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run(command, env=env, cwd=Path(__file__).resolve().parents[2], check=True, stdout=subprocess.DEVNULL)
    return json.loads((out_dir / "profile.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--inner", default=None)
    args = parser.parse_args()
    report = profile(args.device, args.steps, args.out, args.inner, args.warmup)
    print(to_markdown(report))


if __name__ == "__main__":
    main()
