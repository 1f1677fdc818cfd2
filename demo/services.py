"""Run liverl's stages as their own processes, the way a deployment would, and stop them by PID."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from liverl.io import processes


@dataclass
class StageProcess:
    """One `liverl <command>` child: its process, log file and the command line that started it."""

    name: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        return processes.log_tail(self.log, lines)

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll ready() until true; fail early, with the stage's log, if the stage died."""
        processes.wait_until(ready, timeout_s, self.name, self.process, self.log, interval_s=0.5)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (stages drain and exit cleanly), then SIGKILL after timeout_s."""
        processes.stop(self.pid, timeout_s=timeout_s)
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def start_stage(name: str, command: Sequence[str], log_dir: Path, env: dict[str, str] | None = None) -> StageProcess:
    """Start `python -m liverl.cli COMMAND...` with its output in log_dir/<name>.log."""
    log = log_dir / f"{name}.log"
    argv = [sys.executable, "-m", "liverl.cli", *command]
    return StageProcess(name, processes.start(name, argv, log, env=env), log)


def run_stage(name: str, command: Sequence[str], log_dir: Path, timeout_s: float,
              env: dict[str, str] | None = None) -> None:
    """Run a one-shot `liverl` command to completion; fail with its log when it fails or times out."""
    stage = start_stage(name, command, log_dir, env)
    try:
        code = stage.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"`liverl {' '.join(command[:2])}` took over {timeout_s:.0f} s; log:\n{stage.log_tail()}")
    finally:
        if stage.running():  # timed out or interrupted: never leave the child behind
            stage.stop()
    if code != 0:
        raise RuntimeError(f"`liverl {' '.join(command[:2])}` exited {code}; log:\n{stage.log_tail()}")
