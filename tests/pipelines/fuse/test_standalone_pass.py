"""The pass `liger-bot fuse` writes, with the runtime copied beside it, imports and runs from the target checkout
alone: a child process whose sys.path has the target's src/ and the installed packages, but not this repository
(no liger-bot: site's .pth files, the editable install's finder among them, are never read)."""

import json
import subprocess
import sys
import sysconfig

from pipelines.changeset import format_with_target_style
from pipelines.fuse import act
from tests.pipelines.fuse import tiny_model

OPS = ("call_function:mul", "call_function:add", "call_function:tanh")
OP_ARGS = [["0.5"], [None], []]

CHILD = """
import copy, importlib.util, json, sys
sys.path[:0] = [{src!r}, {model_dir!r}]
sys.path.append({site!r})
assert importlib.util.find_spec("pipelines") is None, "this repository is importable"
try:
    import pipelines  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("import pipelines worked")
import torch
from liger_kernel.fuse_passes import registry_with_passes
from liger_kernel.fuse_passes.runtime import compile
import tiny_model_file
model, inputs = tiny_model_file.make()
compiled = compile(copy.deepcopy(model), registry=registry_with_passes(), inner="aot_eager")
torch.testing.assert_close(compiled(*inputs), model(*inputs))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pipelines", "bot", "kernel_templates"))
print(json.dumps({{"replaced": compiled.liger_fuse_stats.replaced, "loaded": loaded}}))
"""


def test_generated_pass_and_runtime_import_and_run_without_liger_bot(tmp_path, liger_checkout):
    root = liger_checkout.root
    written = [act.write_pass(root, "model.py:make", OPS, OP_ARGS), *act.write_runtime(root)]
    format_with_target_style(liger_checkout, [str(p.relative_to(root)) for p in written])
    for path in written:
        assert "pipelines" not in path.read_text(), path  # nothing of this repository named
    (tmp_path / "tiny_model_file.py").write_text(tiny_model.SOURCE)
    child = CHILD.format(src=str(root / "src"), model_dir=str(tmp_path), site=sysconfig.get_paths()["purelib"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH
    done = subprocess.run(
        [sys.executable, "-S", "-c", child], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"replaced": {"fused_mul_add_tanh": 1}, "loaded": []}
