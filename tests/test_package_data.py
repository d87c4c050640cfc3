"""The wheel ships every data file the runtime reads (pyproject's package-data; the sdist-free wheel has no other)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_data_file_of_the_fuse_runtime_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pipelines"]
    runtime = ROOT / "pipelines" / "fuse" / "runtime"
    data = [p for p in runtime.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert {p.name for p in data} >= {"embedding_pool_launch.json", "timings.json"}
    for path in data:
        relative = path.relative_to(ROOT / "pipelines")
        assert any(relative.match(glob) for glob in globs), f"{relative} is not in package-data {globs}"
