"""What a verify run measured beside its gates (the benchmark table and plot), and how a PR body shows them.

The figures come from the worker's out dir (it ran the checks itself) or beside report.json in a GPU runner's
artifact. A pipeline's PR body links its plot relatively, `![benchmark](benchmark.png)`, as its pr_body.md sits
beside the file; `embed_figures` swaps in the link the forge published the plot under.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from bot.forge.assets import MAX_ASSET_BYTES
from bot.forge.base import Forge
from bot.forge.base import ForgeError
from bot.forge.base import RepoRef

BENCHMARK_TABLE_FILE = "benchmark.md"
PLOT_FILE = "benchmark.png"
# the pipeline's relative link to its plot, on a line of its own; PLOT_LINE takes the blank lines before it too
RELATIVE_PLOT_LINK = re.compile(rf"^!\[(?P<alt>[^\]\n]*)\]\({re.escape(PLOT_FILE)}\)[ \t]*$", re.MULTILINE)
PLOT_LINE = re.compile(rf"\n*{RELATIVE_PLOT_LINK.pattern}", re.MULTILINE)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Figures:
    """What a verify run measured beside its gates: the benchmark table (markdown) and its plot (PNG bytes)."""

    table: str = ""
    plot: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_dir(cls, folder: Path | None) -> Figures:
        """From the out dir the pipeline wrote (the worker's own verify). The pipeline's child process ran the
        target's code and could leave a link there, so only regular files are read, never through a link."""
        if folder is None:
            return cls()
        table = _regular_file(Path(folder) / BENCHMARK_TABLE_FILE)
        return cls(table.decode(errors="replace") if table else "", _regular_file(Path(folder) / PLOT_FILE))

    @classmethod
    def from_archive(cls, bundle: zipfile.ZipFile) -> Figures:
        """From the report artifact (a GPU runner's verify); members over the size limit are left out."""
        members = {info.filename: info for info in bundle.infolist() if info.file_size <= MAX_ASSET_BYTES}
        table = bundle.read(BENCHMARK_TABLE_FILE).decode(errors="replace") if BENCHMARK_TABLE_FILE in members else ""
        plot = bundle.read(PLOT_FILE) if PLOT_FILE in members else None
        return cls(table, plot)


def _regular_file(path: Path) -> bytes | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # missing, or a symbolic link
        return None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ASSET_BYTES:
            return None
        return handle.read()


def embed_figures(forge: Forge, repo: RepoRef, body: str, figures: Figures) -> str:
    """`body` showing the run's plot from the forge: each relative `![..](benchmark.png)` line links the published
    copy; a plot the body has no line for (a GPU runner measured it, the CPU worker wrote the body) comes in a
    Benchmark section with its table. With no plot, no image line is left; with one the forge refused, a note."""
    if figures.plot is None:
        return PLOT_LINE.sub("", body)
    link, refusal = _publish(forge, repo, figures.plot)

    def shown(alt: str) -> str:
        return f"![{alt}]({link})" if link else f"_(the benchmark plot was not published: {refusal})_"

    if RELATIVE_PLOT_LINK.search(body):
        return RELATIVE_PLOT_LINK.sub(lambda match: shown(match["alt"]), body)
    section = ["### Benchmark (GPU runner)", figures.table.strip(), shown("benchmark")]
    return "\n\n".join([body.rstrip("\n"), *(part for part in section if part)]) + "\n"


def _publish(forge: Forge, repo: RepoRef, plot: bytes) -> tuple[str | None, ForgeError | None]:
    """The plot's link, or why there is none: the PR opens without its plot rather than not at all."""
    try:
        return forge.publish_asset(repo, PLOT_FILE, plot), None
    except ForgeError as error:
        log.warning("the benchmark plot was not published to %s: %s", repo.full_name, error)
        return None, error
