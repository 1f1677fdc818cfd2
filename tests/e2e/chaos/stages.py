"""The four stages as processes the chaos test can kill -9 and restart, always by the PID it started."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from demo.services import StageProcess, start_stage


class ChaosStage:
    """One `liverl <command>` process, restarted on the same config (and so the same spool and state folders)."""

    def __init__(self, name: str, command: Sequence[str], log_dir: Path, env: dict[str, str]):
        self.name = name
        self.command = list(command)
        self.log_dir = log_dir
        self.env = env
        self.kills = 0
        self.restarts = 0
        self.unexpected_exits: list[str] = []  # exits we did not cause, with the log's tail
        self._lock = threading.Lock()
        self.current: StageProcess = start_stage(name, self.command, log_dir, env)

    @property
    def pid(self) -> int:
        return self.current.pid

    def running(self) -> bool:
        return self.current.running()

    def kill(self) -> int:
        """SIGKILL the process group led by the PID we started (the stage and any child it forked); returns it."""
        with self._lock:
            pid = self.current.pid
            if self.current.running():
                try:
                    os.killpg(pid, signal.SIGKILL)  # start_stage made pid the leader of its own group
                except ProcessLookupError:
                    pass
            self.current.process.wait(timeout=30)
            self.kills += 1
            return pid

    def restart(self) -> None:
        with self._lock:
            if self.current.running():
                raise RuntimeError(f"{self.name} (pid {self.pid}) is still running; kill it before restarting")
            self.current = start_stage(self.name, self.command, self.log_dir, self.env)
            self.restarts += 1

    def revive_if_exited(self) -> bool:
        """Restart a stage that exited by itself (not by our kill); the exit is recorded. True if it had."""
        with self._lock:
            code = self.current.process.poll()
            if code is None:
                return False
            self.unexpected_exits.append(f"{self.name} pid {self.current.pid} exited {code}:\n{self.current.log_tail(40)}")
            self.current = start_stage(self.name, self.command, self.log_dir, self.env)
            self.restarts += 1
            return True

    def stop(self) -> None:
        """SIGTERM (a clean drain), SIGKILL after a while: by the PID we started."""
        with self._lock:
            self.current.stop(timeout_s=20.0)
            try:
                self.current.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def serving_version(config) -> str:
    """The policy version serving reports (ModelInfo); raises while it is not up."""
    import grpc

    from liverl.v1 import serving_pb2, serving_pb2_grpc

    with grpc.insecure_channel(f"{config.serving.host}:{config.serving.grpc_port}") as channel:
        info = serving_pb2_grpc.PolicyServiceStub(channel).ModelInfo(serving_pb2.ModelInfoRequest(), timeout=5)
    return info.policy_version
