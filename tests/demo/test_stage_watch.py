"""The demo ends its traffic when a stage process exits during it, and says which one and why."""

import subprocess
import sys
import threading

import pytest

from demo.services import StageProcess
from demo.stage_watch import StageWatch


def _stage(tmp_path, name: str, code: str) -> StageProcess:
    log = tmp_path / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=sink, stderr=subprocess.STDOUT)
    return StageProcess(name, process, log)


def test_a_stage_that_exits_ends_the_traffic_with_its_log(tmp_path):
    alive = _stage(tmp_path, "train", "import time; time.sleep(60)")
    dying = _stage(tmp_path, "serve", "import time, sys; time.sleep(0.5); print('engine core died'); sys.exit(1)")
    stop, lines = threading.Event(), []
    try:
        with StageWatch([alive, dying], stop, lines.append, interval_s=0.1) as watch:
            assert stop.wait(30)
        assert watch.died is dying and "stage serve" in lines[0] and "exited 1" in lines[0]
        with pytest.raises(RuntimeError, match="(?s)`liverl serve` exited 1.*engine core died"):
            watch.raise_if_died()
    finally:
        alive.process.kill()
        alive.process.wait()


def test_a_healthy_run_is_left_alone(tmp_path):
    alive = _stage(tmp_path, "train", "import time; time.sleep(60)")
    stop = threading.Event()
    try:
        with StageWatch([alive], stop, lambda _: None, interval_s=0.05) as watch:
            assert not stop.wait(0.5)
        watch.raise_if_died()
        assert watch.died is None
    finally:
        alive.process.kill()
        alive.process.wait()
