"""Start long-lived processes detached from the caller, wait for them, and stop them by PID only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Started:
    """A process we started: what `liverl down` needs to stop it, and where it logs."""

    name: str
    pid: int
    log: str
    address: str


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (tests pick their ports with this)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port_block(size: int, spread: int = 0, host: str = "127.0.0.1") -> int:
    """A base port p with p..p+size-1 (and the same +spread, when spread > 0) all free now.

    The block lies outside the OS's ephemeral range: a port in it can be taken at any moment as the local
    port of some client's outgoing connection (or handed out by free_port), between this check and the
    server's bind, and then the server cannot start.
    """
    import random

    low, high = ephemeral_port_range()
    def clear(first: int) -> bool:
        return first + size - 1 < low or first > high
    bases = [base for base in range(10_000, 65_536 - size - spread)
             if clear(base) and (not spread or clear(base + spread))]
    for _ in range(200):
        base = random.choice(bases)
        ports = [base + i for i in range(size)] + ([base + spread + i for i in range(size)] if spread else [])
        if not any(port_open(host, port) for port in ports):
            return base
    raise RuntimeError("no block of free ports found; stop other services or pass ports explicitly")


def ephemeral_port_range() -> tuple[int, int]:
    """The ports the OS gives to outgoing connections and to bind(0) (Linux's default when unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start(name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen:
    """Start argv in its own process group (so children, e.g. MLflow's workers, stop with it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        return subprocess.Popen(
            list(argv), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
        )


def wait_until(ready: Callable[[], bool], timeout_s: float, what: str, process: subprocess.Popen | None = None,
               log: Path | None = None, interval_s: float = 0.25) -> None:
    """Poll ready() every interval_s until true; fail early with the log's tail if the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}; log tail:\n{_tail(log)}")
        try:
            if ready():
                return
        except Exception:  # not up yet: connection refused, half-started HTTP server, ...
            pass
        time.sleep(interval_s)
    raise TimeoutError(f"{what} was not ready after {timeout_s:.0f} s; log tail:\n{_tail(log)}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(pid: int, timeout_s: float = 15.0) -> bool:
    """Stop the process group led by pid (SIGTERM, then SIGKILL). True when something was stopped. Also when the
    leader is gone: what it left in its group (a vLLM engine core outlives a killed server) is killed."""
    if not alive(pid):
        return _kill_leftovers(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(pid)
            if not alive(pid):
                return True
            time.sleep(0.1)
    return True


def _kill_leftovers(group: int) -> bool:
    """SIGKILL whatever is left in a process group whose leader has exited; False when nothing was."""
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap(pid: int) -> None:
    """Collect a child we started ourselves so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _tail(log: Path | None, lines: int = 20) -> str:
    if log is None or not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
