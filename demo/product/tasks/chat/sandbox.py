"""Run model-written Python against unit tests in a separate, limited interpreter.

The code runs in `python -I -S` (isolated: no PYTHON* variables, no user or site packages) in a temporary
working folder that is removed afterwards, under rlimits (CPU seconds, address space, file size, open files, no
core files), with a wall-clock timeout that kills its whole process group, and without network: a new network
namespace where the kernel allows it, and in any case an audit hook, installed before the code runs, that
refuses sockets, subprocesses, exec/fork, file writes, deletions and heap introspection.

Passing means the test script ran to its end: the runner prints a nonce it read from stdin (which the code
cannot see without walking the interpreter's frames on purpose) after the last assertion, so exiting early with
status 0 does not pass.
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RUNNER = r'''
import sys
_nonce = sys.stdin.readline().strip()
with open("solution.py") as _f:
    _solution = _f.read()
with open("tests.py") as _f:
    _tests = _f.read()
_BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
            "pty.", "ctypes.", "os.kill", "os.remove", "os.rmdir", "os.rename", "os.unlink", "shutil.",
            "sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.chdir", "os.chmod")
def _guard(event, args, _blocked=_BLOCKED):
    if event.startswith(_blocked) or (event == "open" and isinstance(args[1], str) and any(c in args[1] for c in "wax+")):
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(_guard)
def _run(nonce, solution, tests):
    scope = {"__name__": "solution"}
    exec(compile(solution, "solution.py", "exec"), scope)
    exec(compile(tests, "tests.py", "exec"), scope)
    sys.stdout.write("\n" + nonce + "\n")
    sys.stdout.flush()
_args = (_nonce, _solution, _tests)
del _nonce, _solution, _tests, _f
_run(*_args)
'''
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 5.0
    cpu_s: int = 3
    memory_mb: int = 256
    output_kb: int = 256


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    reason: str  # "passed", "timeout", "cpu limit", "memory limit", "blocked: ...", or the error's last line
    seconds: float


def run_tests(solution: str, tests: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `solution`, then `tests` (plain asserts) in the same namespace, in a sandboxed interpreter."""
    started = time.monotonic()
    nonce = secrets.token_hex(16)
    folder = Path(tempfile.mkdtemp(prefix="liverl-sandbox-"))
    try:
        (folder / "runner.py").write_text(RUNNER)
        (folder / "solution.py").write_text(solution)
        (folder / "tests.py").write_text(tests)
        with (folder / "out.txt").open("wb") as out, (folder / "err.txt").open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "runner.py"], cwd=folder, stdin=subprocess.PIPE, stdout=out, stderr=err,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True,
                preexec_fn=lambda: _limit(limits),
            )
            try:
                process.communicate((nonce + "\n").encode(), timeout=limits.wall_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process)
                process.wait()
        seconds = time.monotonic() - started
        output = (folder / "out.txt").read_bytes().decode(errors="replace")
        errors = (folder / "err.txt").read_bytes().decode(errors="replace")
        if timed_out:
            return SandboxResult(False, "timeout", seconds)
        passed = process.returncode == 0 and output.rstrip().endswith(nonce)
        return SandboxResult(passed, "passed" if passed else _reason(process.returncode, errors), seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _limit(limits: SandboxLimits) -> None:
    """In the child, before exec: rlimits, and a network namespace of its own when the kernel lets us."""
    memory = limits.memory_mb << 20
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_kb << 10, limits.output_kb << 10))
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)  # fails quietly without the privilege
    except (OSError, AttributeError):
        pass


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reason(returncode: int, errors: str) -> str:
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "cpu limit"
    if returncode == -signal.SIGXFSZ:
        return "output limit"
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    if returncode == 0 and not lines:
        return "exited before the tests finished"
    last = lines[-1] if lines else f"exit status {returncode}"
    if "MemoryError" in last:
        return "memory limit"
    if "sandbox: " in last:
        return "blocked: " + last.split("sandbox: ", 1)[1]
    return last[:300]
