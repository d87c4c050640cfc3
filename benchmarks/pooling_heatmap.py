"""The pooling grid as heatmaps (issue 13): per dtype and pass, our partitioned mean's speed against the best of
segment_reduce, index_add and embedding_bag (best / ours: above 1 we are faster), B x mean length down, D across.

    python -m benchmarks.pooling_heatmap benchmarks/pooling_grid_h200.json benchmarks/pooling_grid_h200.png

Reads the JSON that benchmarks.pooling_grid_gpu writes; imports matplotlib only (no GPU needed).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from benchmarks.pooling_grid_gpu import BASELINES
from benchmarks.pooling_grid_gpu import GRID_B
from benchmarks.pooling_grid_gpu import GRID_D
from benchmarks.pooling_grid_gpu import GRID_LENGTH
from benchmarks.pooling_grid_gpu import best_other
from benchmarks.pooling_grid_gpu import design_ms

PASSES = (("forward_ms", "forward"), ("full_ms", "forward + backward"))


def ratios(rows: list[dict], dtype: str, key: str) -> list[list[float]]:
    """[B x length][D]: best baseline / ours, NaN where the cell was not timed (values over the size limit)."""
    by_cell = {(r["B"], r["mean_length"], r["D"]): r for r in rows if r["dtype"] == dtype}
    table = []
    for b in GRID_B:
        for length in GRID_LENGTH:
            line = []
            for d in GRID_D:
                row = by_cell.get((b, length, d))
                ours = design_ms(row, "ours", key) if row else None
                best = best_other(row, BASELINES, key) if row else math.inf
                line.append(best / ours if ours and not math.isinf(best) else math.nan)
            table.append(line)
    return table


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    dtypes = sorted({r["dtype"] for r in report["grid"]})
    figure, axes = plt.subplots(1, len(dtypes) * len(PASSES), figsize=(5 * len(dtypes) * len(PASSES), 11))
    labels = [f"B {b}, L {length}" for b in GRID_B for length in GRID_LENGTH]
    for index, (dtype, (key, title)) in enumerate((dt, p) for dt in dtypes for p in PASSES):
        axis, table = axes[index], ratios(report["grid"], dtype, key)
        image = axis.imshow(table, cmap="RdYlGn", norm=LogNorm(vmin=0.25, vmax=4.0), aspect="auto")
        for i, line in enumerate(table):
            for j, value in enumerate(line):
                if not math.isnan(value):
                    axis.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
        axis.set_xticks(range(len(GRID_D)), [str(d) for d in GRID_D])
        axis.set_yticks(range(len(labels)), labels if index == 0 else [""] * len(labels), fontsize=7)
        axis.set_xlabel("D")
        axis.set_title(f"{dtype} {title}", fontsize=10)
    figure.colorbar(image, ax=axes, shrink=0.6, label="speed vs the best baseline (> 1: ours faster)")
    figure.suptitle(
        f"partitioned mean on {report.get('device', '?')} (torch {report.get('torch', '?')}): "
        f"best of {', '.join(BASELINES)} / ours; blank: values over the size limit"
    )
    figure.savefig(out, dpi=110, bbox_inches="tight")


def main(argv: list[str]) -> int:
    source, out = Path(argv[0]), Path(argv[1])
    plot(json.loads(source.read_text()), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
