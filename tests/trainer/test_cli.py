"""`liverl train` as the demo runs it: --init-from, then --follow picking up new commits until SIGTERM."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from liverl.contracts import names
from tests.trainer.conftest import cli_overrides, commit_batch, subprocess_env, trainer_config
from trainer.io.registry import Registry

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow


def _liverl(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "liverl.cli", "train", *argv], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)


def test_follow_trains_each_new_commit_and_stops_on_sigterm(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    missing = _liverl("--init-from", str(tmp_path / "nowhere"), *cli_overrides(config))
    assert missing.returncode == 1 and "is not a policy folder" in missing.stderr
    assert _liverl("--init-from", str(tiny_policy_dir), *cli_overrides(config)).returncode == 0
    registry = Registry(config.mlflow)
    assert registry.alias_version(names.ALIAS_CHAMPION) == registry.alias_version(names.ALIAS_CANDIDATE) == "1"
    uri = config.table.trajectories_uri
    argv = [sys.executable, "-m", "liverl.cli", "train", "--follow", *cli_overrides(config),
            "--trainer.follow_interval_s", "0.5"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env())
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.rstrip()) for line in process.stdout], daemon=True)
    reader.start()
    seen: list[str] = []

    def wait_for(prefix: str, timeout_s: float = 180.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                assert process.poll() is None, "\n".join(seen)
                continue
            seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting {prefix!r} in:\n" + "\n".join(seen))

    try:
        wait_for("trainer ready")
        commit_batch(uri, trajectories.batch("f1", 4), "batch-f1", 0)
        wait_for("gate v2 vs v1")
        commit_batch(uri, trajectories.batch("f2", 4), "batch-f2", 1)
        wait_for("gate v3 vs v")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, "\n".join(seen)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    print("\n".join(seen))
    assert any(line.startswith("trainer done") for line in seen)
    assert registry.alias_version(names.ALIAS_CANDIDATE) == "3"
