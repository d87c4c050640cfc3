"""verify: ordered gates on a generated patch, each a GateResult. A hard failure stops the run.

1. checkstyle         the target's `ruff check` + `ruff format --check` over the repo, as its `make checkstyle`
2. import             the new apply function imports from the package root (PYTHONPATH=src, no install)
3. instance patching  the generated test in the target's test_monkey_patch.py, with the file's registry checks
4. whole model        the generated convergence entry's model (its own config; widths / 8 on a CPU host), built
                      through class-level and through instance patching, trained a few fp32 steps beside the
                      unpatched HF model from the same seed: loss, top-k log-probs, first gradients, parameters.
                      A CPU host runs PyTorch references of the Liger kernels (`kernel_references`); a GPU host
                      runs the real kernels. Constructor, attention-implementation and divergence errors fail it.
5. cpu numerics       a tiny HF model vs the same model with Liger's RoPE and the generated lce_forward, both run as
                      Triton by its interpreter: a CPU host's gate; on a GPU host it gives way to gate 4
6. convergence        Liger's four mini-model convergence files -k mini_<model_type> in one pytest run (one
                      xdist worker per file); needs a GPU runner, SKIP otherwise (never PASS); a case outside its
                      tolerance FAILs
A failure of 4 or 6 is bisected by `debug` (which flag, which module) and the diagnosis added to the report.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipelines import changeset
from pipelines import warm_python
from pipelines.autopatch import act
from pipelines.autopatch import supported
from pipelines.autopatch.profile import Profile
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.subprocesses import CommandResult
from pipelines.subprocesses import run_command


class Runner(Protocol):
    """Where verify's commands run: this machine by default; a GPU runner can run the convergence tests."""

    has_gpu: bool

    def run(
        self, argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
    ) -> CommandResult: ...


@dataclass
class LocalRunner:
    has_gpu: bool = False

    def run(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> CommandResult:
        return run_command(argv, cwd=cwd, env=env, timeout=timeout)

    @classmethod
    def detect(cls) -> LocalRunner:
        import torch

        return cls(has_gpu=torch.cuda.is_available())


def target_env() -> dict[str, str]:
    """The checkout's own sources first (not an installed liger-kernel), then whatever PYTHONPATH the host set."""
    inherited = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in ("src", inherited) if p),
        "PYTHONDONTWRITEBYTECODE": "1",
        # Liger's fused MoE autotunes ~200 Triton configs per dtype in every process: on an H200 the four
        # convergence workers of one MoE model had not finished in 7 minutes. Liger's own switch runs its one
        # default config instead (the same sums in another tile order); a runner may set it back to 1.
        "LIGER_FUSED_MOE_AUTOTUNE": os.environ.get("LIGER_FUSED_MOE_AUTOTUNE", "0"),
        "TRITON_CACHE_AUTOTUNING": os.environ.get("TRITON_CACHE_AUTOTUNING", "1"),
    }


def _result(name: str, proc: CommandResult, passed: str, lines: int = 15) -> GateResult:
    if proc.ok:
        return GateResult(name, GateStatus.PASS, passed)
    return GateResult(
        name, GateStatus.FAIL, f"`{' '.join(proc.argv[-4:])}` exited {proc.returncode}:\n{proc.tail(lines)}"
    )


def apply_function(profile: Profile, root: Path) -> str:
    """The function the patched registry maps this model_type to: its own, or (an alias) its owner's."""
    if not profile.identity.alias_of:
        return f"apply_liger_kernel_to_{profile.model_type}"
    return supported.supported_models(root / act.MONKEY_PATCH)[profile.registry_keys[0]]


def gate_import(profile: Profile, root: Path, runner: Runner) -> GateResult:
    fn = apply_function(profile, root)
    argv = [sys.executable, "-c", f"from liger_kernel.transformers import {fn}"]
    proc = warm_python.fresh(runner).run(argv, root, target_env(), 300)  # a fresh interpreter: nothing imported
    return _result("Import", proc, f"from liger_kernel.transformers import {fn}")


def _pytest_summary(output: str) -> str:
    lines = [
        line.strip("= ") for line in output.splitlines() if " in " in line and ("passed" in line or "failed" in line)
    ]
    return lines[-1] if lines else ""


# Registry-wide checks of the target's own file that a new apply function must also satisfy.
REGISTRY_TESTS = ("test_patching_apis_match_auto_mapping", "test_patching_apis_support_patching_model_instance")


def instance_test_ids(model_type: str) -> list[str]:
    """Exact node ids: `-k <model_type>` would also select other models' tests (qwen3 matches qwen3_vl)."""
    names = (f"test_apply_liger_kernel_to_instance_for_{model_type}", *REGISTRY_TESTS)
    return [f"{act.INSTANCE_TEST}::{name}" for name in names]


def gate_instance_patching(profile: Profile, root: Path, runner: Runner) -> GateResult:
    argv = [sys.executable, "-m", "pytest", *instance_test_ids(profile.model_type), "-q", "-p", "no:cacheprovider"]
    proc = runner.run(argv, root, target_env(), 600)
    summary = _pytest_summary(proc.output)
    if proc.ok and "passed" in summary:
        detail = f"test_apply_liger_kernel_to_instance_for_{profile.model_type} + registry checks: {summary}"
        return GateResult("Instance patching", GateStatus.PASS, detail)
    return _result("Instance patching", proc, summary, lines=40)


NUMERICS_SCRIPT = r"""
import importlib, inspect, json, sys
import torch
spec = json.loads(sys.argv[1])
torch.manual_seed(0)
config_cls = getattr(importlib.import_module(spec["config_module"]), spec["config_class"])
config = config_cls(**spec["config"])
for name, value in spec["after"].items():  # set past the config's validator (a float-typed softcap set to None)
    config.__dict__[name] = value  # not setattr: a @strict config checks each field's type on assignment too
modeling = importlib.import_module(spec["modeling_module"])
model_cls = getattr(modeling, spec["causal_lm_class"])
input_ids = torch.randint(0, config.vocab_size, (2, 16))
try:
    reference = model_cls(config).float().eval()  # dropout off (Seed-OSS: residual_dropout 0.1)
    with torch.no_grad():
        expected = reference(input_ids=input_ids, labels=input_ids)
except Exception as exc:
    if not spec["after"]:
        raise
    # the unpatched model itself does not run with these set (a softcap module dividing by the cap unconditionally)
    print(json.dumps({"reference_failed": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
from liger_kernel.transformers import monkey_patch
apply_fn = getattr(monkey_patch, spec["apply_function"])
wanted = {"rope": True, "fused_linear_cross_entropy": True, "cross_entropy": False, "rms_norm": False,
          "layer_norm": False, "swiglu": False, "geglu": False, "relu_squared": False}
params = inspect.signature(apply_fn).parameters
apply_fn(**{k: v for k, v in wanted.items() if k in params})
patched = model_cls(config).float().eval()
patched.load_state_dict(reference.state_dict())
with torch.no_grad():
    fused = patched(input_ids=input_ids, labels=input_ids, skip_logits=True)
    unfused = patched(input_ids=input_ids, labels=input_ids, skip_logits=False)
print(json.dumps({
    "rope_patched": modeling.apply_rotary_pos_emb.__module__.startswith("liger_kernel")
    if hasattr(modeling, "apply_rotary_pos_emb") else False,
    "loss_ref": expected.loss.item(),
    "loss_flce": fused.loss.item(),
    "flce_logits_skipped": fused.logits is None,
    "loss_diff": abs(expected.loss.item() - fused.loss.item()),
    "logits_diff": (expected.logits - unfused.logits).abs().max().item(),
}))
"""
CPU_NUMERICS = "CPU numerics (RoPE, FLCE)"
NUMERICS_TOLERANCE = 1e-4  # float32, tiny model: Liger's kernels match HF to ~1e-6 here


def gate_cpu_numerics(profile: Profile, root: Path, runner: Runner) -> GateResult:
    if runner.has_gpu:  # a CPU-host gate: on a GPU host the whole-model gate runs these kernels for real
        return GateResult(
            CPU_NUMERICS, GateStatus.SKIP, "GPU host: the whole-model gate ran the real kernels", hard=False
        )
    own_cap = act.own_softcap(profile)
    if own_cap:  # it cannot be switched off as the config's final_logit_softcapping is below
        why = (
            f"the forward caps its logits with {own_cap} unconditionally, and Liger's softcap path"
            " (`softcap.to(tl.float32)` on a scalar) does not run in Triton's interpreter: the whole-model gate's"
            " PyTorch references and Liger's GPU convergence test check it"
        )
        return GateResult(CPU_NUMERICS, GateStatus.SKIP, why, hard=False)
    from pipelines.autopatch import probes  # torch: only this gate needs it

    the_plan = act.plan(profile)
    # the probes' tiny config: understand already ran this model at that size (MLA, experts and all)
    config = probes.tiny_config_kwargs(act.config_class(the_plan))
    softcap_off, after = bool(profile.value("logit_softcapping")), {}
    if softcap_off:  # Liger's softcap path (`softcap.to(tl.float32)` on a scalar) does not run in the interpreter
        config.pop("final_logit_softcapping", None)
        after["final_logit_softcapping"] = None
    spec = {
        "model_type": profile.model_type,
        "apply_function": apply_function(profile, root),
        "config_module": the_plan.config_module,
        "config_class": profile.identity.config_class,
        "modeling_module": profile.identity.modeling_module,
        "causal_lm_class": profile.identity.causal_lm_class,
        "config": config,
        "after": after,
    }
    env = {**target_env(), "TRITON_INTERPRET": "1"}
    proc = runner.run([sys.executable, "-c", NUMERICS_SCRIPT, json.dumps(spec)], root, env, 600)
    if not proc.ok:
        return _result(CPU_NUMERICS, proc, "")
    found = json.loads(proc.output.strip().splitlines()[-1])
    if "reference_failed" in found:  # the unpatched model, not the patch: what the interpreter cannot run is HF's
        why = (
            f"with softcapping off (Triton's interpreter cannot run Liger's softcap path) the unpatched HF model "
            f"itself fails ({found['reference_failed'][:200]}): its cap cannot be switched off here; the whole-model "
            "gate's PyTorch references and Liger's GPU convergence test check it"
        )
        return GateResult(CPU_NUMERICS, GateStatus.SKIP, why, hard=False)
    detail = (
        f"loss HF {found['loss_ref']:.6f} vs FLCE {found['loss_flce']:.6f} (diff {found['loss_diff']:.1e}), "
        f"logits max diff {found['logits_diff']:.1e}, RoPE {'patched' if found['rope_patched'] else 'not patched'}"
    )
    if softcap_off:
        detail += "; softcapping off (Triton's interpreter cannot run Liger's softcap path: left to convergence)"
    ok = found["loss_diff"] < NUMERICS_TOLERANCE and found["logits_diff"] < NUMERICS_TOLERANCE
    ok = ok and found["flce_logits_skipped"]
    return GateResult(CPU_NUMERICS, GateStatus.PASS if ok else GateStatus.FAIL, detail)


# -- whole model ---------------------------------------------------------------------------------------------

WHOLE_MODEL = "Whole model (fp32, class + instance patching)"
TOLERANCE_NAMES = ("loss_atol", "loss_rtol", "logprobs_atol", "logprobs_rtol", "param_atol", "param_rtol")


@dataclass(frozen=True)
class ConvergenceEntry:
    """The generated `mini_<model>` entry of one convergence file, read back from the file as written."""

    config_class: str
    config: dict
    lr: float
    tolerances: dict[str, float]


def convergence_entry(root: Path, model_type: str, path: Path = act.CONVERGENCE_FILES[2]) -> ConvergenceEntry:
    """`MINI_MODEL_SETUPS["mini_<model>"]` and its `test_mini_model` case, as literals; fp32 FLCE file by default."""
    source = (root / path).read_text()
    tree = ast.parse(source)
    name = f"mini_{model_type}"
    setup = next((n for n in tree.body if act.edits.guarded_setup(n) == name), None)
    cases = act.edits.find_parametrize_list(act.edits.find_function(tree, "test_mini_model")).elts
    case = next((c for c in cases if act.edits.case_name(c) == name), None)
    if setup is None or case is None:
        raise PipelineError(f"{path} has no {name} entry", hint="the convergence edit did not apply")
    call = next(k.value for k in setup.body[0].value.keywords if k.arg == "mini_model_config")
    config = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    values = case.args if isinstance(case, ast.Call) else case.elts
    lr, *tolerances = (ast.literal_eval(v) for v in (values[2], *values[4:10]))
    return ConvergenceEntry(ast.unparse(call.func), config, lr, dict(zip(TOLERANCE_NAMES, tolerances, strict=True)))


def convergence_flags(model_type: str) -> dict[str, bool]:
    """The kwargs Liger's `run_mini_model` passes to every patch function (its name-based rules included)."""
    no_rope = ("glm4", "qwen3_next", "qwen3_5", "deepseek_v3", "deepseek_v4")
    flags = {"rope": not any(n in model_type for n in no_rope), "rms_norm": True}
    flags["geglu" if "gemma" in model_type else "swiglu"] = True
    return flags | {"fused_linear_cross_entropy": True, "cross_entropy": False}


# On a CPU host the entry's widths are divided by this (every other field kept: attention implementation, layer
# count and types, heads, router, dropout, tying); a GPU host runs the entry's config as written.
CPU_WIDTH_DIVISOR = 8
WIDTH_FIELDS = ("d_model", "hidden_size", "intermediate_size", "moe_intermediate_size", "head_dim")
WIDTH_FIELDS += ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")  # MLA
WIDTH_FIELDS += ("rotary_dim",)  # a partial rotary width within head_dim


# The GPU entry's router picks every expert (act.MINI_CONVERGENCE_CONFIG says why); the CPU gate, exact in fp32,
# gives it these many experts to pick from, so a patch that routes tokens to the wrong experts shows there.
CPU_ROUTED_EXPERTS = 8


# An entry this narrow is CPU-sized as written (mini_deepseek_v3's hidden 32, its MLA ranks 8: divided, its heads
# are 1 wide and the unpatched model itself fails); the copies of such an entry (an alias's) run unshrunk.
CPU_SIZED_HIDDEN = 256


def cpu_config(config: dict, sparse_router: bool = True) -> dict:
    """The entry at CPU widths; with `sparse_router`, CPU_ROUTED_EXPERTS experts behind its router."""
    divisor = 1 if config.get("hidden_size", config.get("d_model", 0)) <= CPU_SIZED_HIDDEN else CPU_WIDTH_DIVISOR
    shrunk = {k: v // divisor if k in WIDTH_FIELDS and isinstance(v, int) else v for k, v in config.items()}
    if not sparse_router:
        return shrunk
    return {k: CPU_ROUTED_EXPERTS if k in act.ROUTED_EXPERT_FIELDS else v for k, v in shrunk.items()}


def model_check_spec(profile: Profile, root: Path, device: str, flags: dict | None = None) -> dict:
    entry = convergence_entry(root, profile.model_type)
    ident = profile.identity
    return {
        "model_type": profile.model_type,
        "apply_function": apply_function(profile, root),
        "config_module": act.plan(profile).config_module,
        "config_class": entry.config_class,
        "modeling_module": ident.modeling_module,
        "causal_lm_class": ident.causal_lm_class,
        "config": cpu_config(entry.config) if device == "cpu" else entry.config,
        "lr": entry.lr,
        "tolerances": entry.tolerances,
        "flags": convergence_flags(profile.model_type) if flags is None else flags,
        "device": device,
    }


def check_device(runner: Runner) -> str:
    return "cuda" if runner.has_gpu else "cpu"


def run_model_check(spec: dict, root: Path, runner: Runner, debug: bool = False) -> tuple[CommandResult, dict | None]:
    """The model_check child (the whole-model check, or `debug`'s bisection) and its JSON result, if it gave one."""
    env = {**target_env(), **({} if spec["device"] != "cpu" else {"TRITON_INTERPRET": "1"})}
    argv = [sys.executable, "-m", "pipelines.autopatch.model_check", *(["--debug"] if debug else []), json.dumps(spec)]
    proc = runner.run(argv, root, env, 1800 if debug else 1200)
    last = proc.output.strip().splitlines()[-1] if proc.ok and proc.output.strip() else ""
    try:
        return proc, json.loads(last) if last.startswith("{") else None
    except ValueError:
        return proc, None


def _run_summary(name: str, run: dict) -> str:
    if "error" in run:
        return f"{name}: {run['error']} ({run.get('where', '')})"
    if name == "reference":
        return ""
    if run.get("skipped"):  # bf16: the unpatched model fails the same step (model_check._bf16_step says why)
        return f"{name}: skipped: {run['skipped']}"
    if run.get("smoke"):  # bf16: it builds and trains one step with a finite loss (no numbers compared)
        return f"{name}: one step, loss {run['loss'][0]:.3f}"
    checks = [
        f"loss max diff {run['loss_check']['max_abs']:.1e}",
        f"top-k logprobs max diff {run['topk_check']['max_abs']:.1e}"
        f" ({run['topk_check']['mismatched']} outside tolerance)",
        f"first-step gradients rel {run['grad_check']['rel']:.1e}"
        + (f" (worst {run['grad_check']['worst']})" if run["grad_check"]["worst"] else ""),
        f"params {run['param_check']['mismatched']} outside tolerance",
    ]
    if run["grad_check"].get("missing"):  # a parameter without a gradient: a swap cut it out of the graph
        checks.append(f"no gradient for {', '.join(run['grad_check']['missing'][:5])}")
    if run["param_check"].get("names"):  # parameters only one model has: a swap renamed or dropped them
        checks.append(f"parameters in one model only: {', '.join(run['param_check']['names'][:5])}")
    return f"{name}: {'match' if run['ok'] else 'DIVERGES'} ({', '.join(checks)})"


def gate_whole_model(profile: Profile, root: Path, runner: Runner) -> GateResult:
    device = check_device(runner)
    try:
        spec = model_check_spec(profile, root, device)
    except (PipelineError, ValueError, SyntaxError) as exc:
        return GateResult(WHOLE_MODEL, GateStatus.FAIL, f"cannot read the generated convergence entry: {exc}")
    proc, found = run_model_check(spec, root, runner)
    if found is None:
        return _result(WHOLE_MODEL, proc, "")
    lines = [_run_summary(name, run) for name, run in found["runs"].items()]
    if "rounding_control" in found:
        lines.append(control_summary(found["rounding_control"]))
    ran = found["reference"] or found["triton"]
    how = "as PyTorch references of Liger's kernels (CPU host)" if found["reference"] else f"as Triton on {device}"
    kernels = f"Liger kernels called {how}: {', '.join(ran) or 'none'}"
    detail = "; ".join([line for line in lines if line] + [kernels])
    return GateResult(WHOLE_MODEL, GateStatus.PASS if found["ok"] else GateStatus.FAIL, detail)


def control_summary(control: dict) -> str:
    """model_check's rounding control in a line: outside the tolerances, a divergence of the patched runs this size
    is what fp32 rounding alone does at the entry's lr (gemma4_unified_text at 1e-4), not a wrong swap."""
    if control.get("skipped"):
        return f"rounding control: not run ({control['skipped']})"
    if "error" in control:
        return f"rounding control: {control['error']} ({control.get('where', '')})"
    numbers = (
        f"loss max diff {control['loss_check']['max_abs']:.1e}, top-k logprobs max diff "
        f"{control['topk_check']['max_abs']:.1e} ({control['topk_check']['mismatched']} outside tolerance)"
    )
    if control["ok"]:
        return f"rounding control ({control.get('what', 'rounding only')}): inside the tolerances ({numbers})"
    return (
        f"rounding control ({control.get('what', 'rounding only')}): OUTSIDE the tolerances ({numbers}): at this "
        "entry's lr fp32 rounding alone diverges this far, so the entry cannot tell a patch from rounding (a lower lr, "
        "as Liger's maintainers chose for the architecture, or looser tolerances)"
    )


def convergence_gate_name(path: Path) -> str:
    return f"Convergence {path.parts[2]} {'with_logits' if 'with_logits' in path.name else 'FLCE'}"


def convergence_argv(model_type: str, junit: Path, workers: int) -> list[str]:
    """The four files in one pytest run, one xdist worker per file where pytest-xdist is installed."""
    # "mini_glm-" (pytest 8 takes '-' in -k): "mini_glm" alone would also run mini_glm4, mini_glm4v, mini_glm4v_moe
    argv = [sys.executable, "-m", "pytest", *map(str, act.CONVERGENCE_FILES), "-k", f"mini_{model_type}-"]
    argv += ["-q", "-rA", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    return argv + (["-n", str(workers)] if workers > 1 else [])


def convergence_workers() -> int:
    import importlib.util

    return len(act.CONVERGENCE_FILES) if importlib.util.find_spec("xdist") else 1


def junit_cases(junit: Path, model_type: str) -> list[dict]:
    """This model's testcases of a JUnit XML report (`test_mini_model[mini_<model>-...]`): file, status, message."""
    from xml.etree import ElementTree

    cases = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        if f"[mini_{model_type}-" not in case.get("name", ""):
            continue
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        status = "passed" if outcome is None else outcome.tag
        message = "" if outcome is None else (outcome.get("message") or outcome.text or "")[:600]
        cases.append(
            {"file": case.get("classname", "").replace(".", "/") + ".py", "status": status, "message": message}
        )
    return cases


def _file_gate(path: Path, cases: list[dict], output: str) -> GateResult:
    name = convergence_gate_name(path)
    mine = [c for c in cases if c["file"] == path.as_posix()]  # one model's cases, from this file
    if not mine:
        return GateResult(name, GateStatus.FAIL, f"no mini case collected from {path}:\n{output[-1500:]}")
    bad = [c for c in mine if c["status"] != "passed"]
    if not bad:
        return GateResult(name, GateStatus.PASS, f"{len(mine)} passed")
    if all(c["status"] == "skipped" for c in bad):
        return GateResult(name, GateStatus.SKIP, bad[0]["message"], hard=False)
    return GateResult(name, GateStatus.FAIL, "; ".join(f"{c['status']}: {c['message']}" for c in bad))


def gate_convergence(profile: Profile, root: Path, runner: Runner) -> list[GateResult]:
    if not runner.has_gpu:
        return [
            GateResult(convergence_gate_name(p), GateStatus.SKIP, "needs GPU runner", hard=False)
            for p in act.CONVERGENCE_FILES
        ]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="liger-bot-convergence-") as scratch:
        junit = Path(scratch) / "convergence.xml"
        argv = convergence_argv(profile.model_type, junit, convergence_workers())
        proc = runner.run(argv, root, {**target_env(), "HF_DATASETS_OFFLINE": "1"}, 3600)
        if not junit.is_file():
            return [_result(convergence_gate_name(p), proc, "", lines=30) for p in act.CONVERGENCE_FILES]
        cases = junit_cases(junit, profile.model_type)
    return [_file_gate(path, cases, proc.output) for path in act.CONVERGENCE_FILES]


CHECKSTYLE = "Checkstyle"


def gate_checkstyle(profile: Profile, root: Path, runner: Runner) -> GateResult:
    check = runner.run(changeset.ruff_argv("check", "--output-format=concise", "."), root, None, 300)
    if not check.ok:
        return _result(CHECKSTYLE, check, "")
    fmt = runner.run(changeset.ruff_argv("format", "--check", "."), root, None, 300)
    return _result(CHECKSTYLE, fmt, "ruff check . && ruff format --check . (ruff 0.14.11)")


# A failure of these is bisected (pipelines/autopatch/debug.py) and the diagnosis added to the report.
DIAGNOSED = (
    WHOLE_MODEL,
    *(
        f"Convergence {p.parts[2]} {'with_logits' if 'with_logits' in p.name else 'FLCE'}"
        for p in act.CONVERGENCE_FILES
    ),
)
Gate = Callable[[Profile, Path, Runner], "GateResult | list[GateResult]"]
GATES: tuple[tuple[str, Gate], ...] = (
    (CHECKSTYLE, gate_checkstyle),
    ("Import", gate_import),
    ("Instance patching", gate_instance_patching),
    (WHOLE_MODEL, gate_whole_model),
    (CPU_NUMERICS, gate_cpu_numerics),
    ("Convergence", gate_convergence),
)


def verify(
    profile: Profile,
    root: Path,
    runner: Runner | None = None,
    progress: Callable[[str], None] = lambda _: None,
    gates: tuple[tuple[str, Gate], ...] = GATES,
) -> list[GateResult]:
    """Run the gates in order; after a hard failure the rest are reported as not run.

    On a CPU host the gates' Python children fork from one warm interpreter (`warm_python`: torch and
    transformers imported once, the gates' own environment); the import gate starts a fresh one."""
    runner = runner or LocalRunner.detect()
    if type(runner) is LocalRunner and not runner.has_gpu:
        with warm_python.WarmRunner(runner, root, target_env()) as warm:
            return _verify(profile, root, warm, progress, gates)
    return _verify(profile, root, runner, progress, gates)


def _verify(
    profile: Profile, root: Path, runner: Runner, progress: Callable[[str], None], gates: tuple[tuple[str, Gate], ...]
) -> list[GateResult]:
    results: list[GateResult] = []
    failed: str | None = None
    for name, gate in gates:
        if failed:
            results.append(GateResult(name, GateStatus.SKIP, f"not run: {failed} failed", hard=False))
            continue
        progress(f"verify: {name}")
        outcome = gate(profile, root, runner)
        batch = outcome if isinstance(outcome, list) else [outcome]
        results.extend(batch)
        for result in batch:  # the verdict as it lands: a run cut short by a runner's timeout still shows it
            progress(result.said())
        hard = [g for g in batch if g.status is GateStatus.FAIL and g.hard]
        failed = hard[0].name if hard else None
        if any(g.status is GateStatus.FAIL and g.name in DIAGNOSED for g in batch):
            from pipelines.autopatch.debug import diagnosis_gate  # debug imports this module

            progress("verify: diagnosing the divergence (liger-bot debug)")
            diagnosis = diagnosis_gate(profile, root, runner)
            progress(diagnosis.said())
            results.append(diagnosis)
    return results
