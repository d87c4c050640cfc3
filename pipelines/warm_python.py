"""A warm interpreter for verify's Python gate children: torch and transformers imported once, each gate forked.

Each gate child (`python -m pytest ...`, `python -m pipelines.autopatch.model_check ...`, `python -c SCRIPT`)
pays ~8 s of CPU to import torch + transformers before it runs anything of its own. `WarmRunner` starts one server
process per verify with exactly the environment and working directory a gate child gets (`run_command`'s
allow-listed environment plus the gate's own names: no secrets), has it import torch and transformers, and forks
each gate child from it:

- a child is its own process (and process group): a crash, a hang or an `os._exit` in one gate is that gate's
  return code, its output that gate's output; the timeout kills the child's group as `run_command`'s would;
- it gets the gate's environment, working directory, argv and a `sys.path[0]` as `python -c` / `python -m` set
  them; only commands whose environment is the server's, give or take `LAZY_NAMES` (TRITON_INTERPRET: the
  server does not import Triton), go through it; anything else, or a server that did not come up, runs fresh;
- the server never runs target code: it imports the two libraries from the same `sys.path` a gate child has.

    python -m pipelines.warm_python      (the server: requests on stdin, replies on stdout, one JSON line each)
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.subprocesses import CommandResult
from pipelines.subprocesses import allowed_env

# Names a request may set or drop beside the server's environment while the server has not imported Triton:
# Triton reads TRITON_INTERPRET when it defines a kernel, its own library's `@triton.jit` helpers included, so a
# process that imported Triton without it cannot interpret kernels (and one with it cannot compile them).
LAZY_NAMES = frozenset({"TRITON_INTERPRET"})
# torch and the parts of transformers that do not import Triton (torch._dynamo does, through
# transformers.modeling_utils): ~5.8 of the ~7.9 CPU-seconds of `import transformers.modeling_utils`.
WARM_IMPORTS = (
    "torch",
    "torch.distributed.tensor",
    "torch.fx.experimental.symbolic_shapes",
    "transformers",
    "transformers.configuration_utils",
    "transformers.cache_utils",
    "transformers.utils.hub",
    "transformers.integrations.accelerate",
    "transformers.quantizers.auto",
)
READY_TIMEOUT = 300.0


# -- the server ----------------------------------------------------------------------------------------------


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(request: dict, protocol: tuple[int, int]) -> None:
    """In the forked child: become the gate's process (env, cwd, fds, argv, __main__), run it, exit with its code."""
    code = 1
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in protocol:  # the gate cannot read the next request or write a reply (the number stays taken)
            os.dup2(null, fd)
        out = os.open(request["output"], os.O_WRONLY | os.O_APPEND)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import runpy
        import types

        flag, target, *rest = request["argv"]
        if flag == "-c":
            sys.argv = ["-c", *rest]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            sys.argv = ["-m", *rest]
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(target)  # what `python -m` calls
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        import traceback

        # as the interpreter prints it: from the gate's own frames (this function's left out)
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def _wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {"returncode": -9, "timed_out": True}
        time.sleep(0.05)


def serve() -> None:
    # the protocol on private copies of stdin / stdout; the standard fds point at /dev/null (a child replaces them)
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    reader, writer = os.fdopen(requests, "r"), os.fdopen(replies, "w", buffering=1)
    try:
        import importlib

        for name in WARM_IMPORTS:
            importlib.import_module(name)
    except BaseException as exc:
        writer.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    writer.write(json.dumps({"ready": True, "triton": "triton" in sys.modules}) + "\n")
    for line in reader:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, (requests, replies))
        writer.write(json.dumps({"pid": pid}) + "\n")
        writer.write(json.dumps(_wait(pid, request["timeout"])) + "\n")


# -- the client ----------------------------------------------------------------------------------------------


class WarmRunner:
    """A Runner whose Python children fork from one warm server; anything it cannot take runs as `inner` runs it."""

    def __init__(self, inner, cwd: Path, env: dict[str, str]):
        self.inner = inner
        self.has_gpu = inner.has_gpu
        self.cwd = Path(cwd)
        self.env = {**allowed_env(), **env}  # exactly what run_command hands a child with `env`
        self.server: subprocess.Popen | None = None
        self.pending = b""
        self.broken = False
        self.lazy = LAZY_NAMES  # emptied if the server turns out to have imported Triton
        self.forked = 0  # commands that went through the server (tests read it)

    def __enter__(self) -> WarmRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.stdin.close()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server, self.pending = None, b""

    def takes(self, argv: list[str], cwd: Path, env: dict[str, str] | None) -> bool:
        if self.broken or len(argv) < 3 or argv[0] != sys.executable or argv[1] not in ("-c", "-m"):
            return False
        merged = {**allowed_env(), **(env or {})}
        names = set(merged) | set(self.env)
        return Path(cwd) == self.cwd and all(merged.get(n) == self.env.get(n) for n in names - self.lazy)

    def _reply(self, timeout: float) -> dict | None:
        """The server's next JSON line, or None if it closed its end or gave none within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.server.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def _start(self) -> bool:
        if self.server is None and not self.broken:
            argv = [sys.executable, "-m", "pipelines.warm_python"]
            self.server = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
            )
            ready = self._reply(READY_TIMEOUT)
            if not (ready and ready.get("ready")):
                self._give_up()
            elif ready["triton"]:
                self.lazy = frozenset()
        return not self.broken

    def _give_up(self) -> None:
        self.broken = True
        if self.server is not None:
            self.server.kill()
            self.server.wait()
        self.server = None

    def run(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> CommandResult:
        if not (self.takes(argv, cwd, env) and self._start() and self.takes(argv, cwd, env)):
            return self.inner.run(argv, cwd, env, timeout)
        merged = {**allowed_env(), **(env or {})}
        with tempfile.NamedTemporaryFile(prefix="liger-bot-gate-", suffix=".log") as output:
            request = {"argv": argv[1:], "cwd": str(cwd), "env": merged, "timeout": timeout, "output": output.name}
            try:
                self.server.stdin.write((json.dumps(request) + "\n").encode())
                started = self._reply(60)
            except OSError:  # a server that exited
                started = None
            done = self._reply(timeout + 60) if started else None
            if done is None:  # the server itself died or hung: this command runs fresh, as without it
                if started:
                    try:
                        os.killpg(started["pid"], signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._give_up()
                return self.inner.run(argv, cwd, env, timeout)
            self.forked += 1
            text = Path(output.name).read_text(errors="replace")
        if done.get("timed_out"):
            text += f"\n[timed out after {timeout:.0f}s]"
        return CommandResult(tuple(argv), done["returncode"], text)


def fresh(runner):
    """The runner a command that must start from a fresh interpreter (the import gate) runs on."""
    return runner.inner if isinstance(runner, WarmRunner) else runner


if __name__ == "__main__":
    serve()
