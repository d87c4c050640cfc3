#!/usr/bin/env bash
# Prepares, on the CPU host, what benchmarks/perf_gpu.sh needs on the GPU host, in one git-ignored folder (default
# .perf, carried to the device, well under the 64 MiB carry limit):
#   .perf/lk       a slim Liger-Kernel 0.8.5 checkout (src, test without test/resources, benchmark/scripts, the
#                  project files), committed as one fresh commit; 55 MB with docs and test resources, ~4 MB here
#   .perf/wheels   liger-bot's wheel (`pip wheel --no-deps .`) and the wheels of its pure-Python-side dependencies
#                  the GPU host may lack (libcst, Jinja2, MarkupSafe, PyYAML, ruff), cp312 manylinux x86_64
#
#   bash benchmarks/perf_gpu_prepare.sh [.perf]        # then: the device call in perf_gpu.sh's header
set -euo pipefail
DEST=${1:-.perf}
PY=${PYTHON:-python3}
LIGER_BOT=${LIGER_BOT:-liger-bot}
rm -rf "$DEST"
mkdir -p "$DEST/wheels"

full=$(mktemp -d)/lk
"$LIGER_BOT" target fetch "$full" >/dev/null
mkdir -p "$DEST/lk/test" "$DEST/lk/benchmark"
cp -r "$full/src" "$DEST/lk/"
cp -r "$full/benchmark/scripts" "$DEST/lk/benchmark/"
for item in "$full"/test/*; do
  [ "$(basename "$item")" = resources ] || cp -r "$item" "$DEST/lk/test/"
done
for file in pyproject.toml setup.py setup.cfg README.md PKG-INFO Makefile .gitignore LICENSE NOTICE; do
  [ -e "$full/$file" ] && cp "$full/$file" "$DEST/lk/"
done
rm -rf "$(dirname "$full")"
git -C "$DEST/lk" init -q -b main
git -C "$DEST/lk" add -A
git -C "$DEST/lk" -c user.name=liger-bot -c user.email=liger-bot@users.noreply.github.com commit -q \
  -m "liger-kernel 0.8.5 (from the PyPI sdist; slim: no docs, examples or test resources)"

"$PY" -m pip wheel -q --no-deps -w "$DEST/wheels" .
rm -rf build  # setuptools' build folder
"$PY" -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST/wheels" libcst==1.9.0 Jinja2==3.1.6 MarkupSafe==3.0.4 PyYAML==6.0.4 ruff==0.14.11
du -sh "$DEST" "$DEST/lk" "$DEST/wheels"
ls "$DEST/wheels"
