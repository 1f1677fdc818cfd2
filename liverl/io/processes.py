"""Start long-lived processes detached from the caller, wait for them, and stop them by PID only."""

from __future__ import annotations

import os
import re
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


LOWEST_PICKED_PORT = 10_000  # free_port draws from here up to the OS's ephemeral range
_HANDED_OUT: set[int] = set()  # every port free_port_block gave out in this process


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now for a server to bind (tests and benches pick their servers' ports with this); see
    free_port_block."""
    return free_port_block(1, host=host)


def free_port_block(size: int, spread: int = 0, host: str = "127.0.0.1") -> int:
    """A base port p with p..p+size-1 (and the same +spread, when spread > 0) all free now.

    Every port lies outside the OS's ephemeral range: a port in it can be taken at any moment as the local port
    of some client's outgoing connection, between this check and the server's bind (seconds later, when the
    server is a process that first imports its libraries), and then the server cannot start. No port is handed
    out twice by one process, and parallel test workers draw from disjoint slices (_port_pool).
    """
    import random

    def bases(pool: range) -> range:  # every base whose block, spread part included, lies in the pool
        return range(pool.start, pool.stop - size - spread + 1)

    choices = bases(_port_pool()) or bases(_port_pool(sliced=False))  # a slice too narrow for the spread: all
    for _ in range(200):
        base = random.choice(choices)
        ports = [base + i for i in range(size)] + ([base + spread + i for i in range(size)] if spread else [])
        if _HANDED_OUT.isdisjoint(ports) and all(_bindable(host, port) for port in ports):
            _HANDED_OUT.update(ports)
            return ports[0]
    raise RuntimeError("no block of free ports found; stop other services or pass ports explicitly")


def _port_pool(sliced: bool = True) -> range:
    """The ports free_port_block draws from: from LOWEST_PICKED_PORT up to the ephemeral range (above it, where the
    OS's range starts too low). Under pytest-xdist, worker i of n draws from the i-th of n equal slices, so two
    workers never pick the same port."""
    low, high = ephemeral_port_range()
    pool = range(LOWEST_PICKED_PORT, low) if low - LOWEST_PICKED_PORT >= 4096 else range(high + 1, 65536)
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (sliced and worker.startswith("gw") and worker[2:].isdigit() and workers.isdigit() and int(workers) > 1):
        return pool
    width = len(pool) // int(workers)
    first = pool.start + int(worker[2:]) % int(workers) * width
    return range(first, first + width)


def _bindable(host: str, port: int) -> bool:
    """Whether a server could bind the port now (no SO_REUSEADDR: a port in TIME_WAIT counts as taken)."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


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
            raise RuntimeError(f"{what} exited with code {process.returncode}; log tail:\n{log_tail(log)}")
        try:
            if ready():
                return
        except Exception:  # not up yet: connection refused, half-started HTTP server, ...
            pass
        time.sleep(interval_s)
    raise TimeoutError(f"{what} was not ready after {timeout_s:.0f} s; log tail:\n{log_tail(log)}")


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


# A line that names an error: an exception's last line ("OSError: ...") or a logger's ERROR line.
_ERROR_LINE = re.compile(r"\b[A-Za-z_.]*(Error|Exception): |\bERROR\b")


def log_tail(log: Path | None, lines: int = 20, earlier_errors: int = 8) -> str:
    """The log's last lines, after the first error lines that came before them.

    A process that dies of a chained failure logs its root cause well before its end: a vLLM engine whose worker
    failed ends in the engine's own traceback, and the worker's exception is pages above it."""
    if log is None or not log.exists():
        return "(no log)"
    text = log.read_text(errors="replace").splitlines()
    tail = text[-lines:]
    earlier = list(dict.fromkeys(line for line in text[:-lines] if _ERROR_LINE.search(line)))[:earlier_errors]
    if not earlier:
        return "\n".join(tail)
    return "\n".join(["(earlier errors)", *earlier, "(last lines)", *tail])
