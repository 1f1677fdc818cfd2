"""Stopping a process group also stops what its leader left behind (a vLLM engine core outlives a killed server)."""

import sys
import time

from liverl.io import processes


def test_stop_kills_what_an_exited_leader_left_in_its_group(tmp_path):
    pid_file = tmp_path / "orphan.pid"
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))")  # the leader exits at once, its child sleeps on
    leader = processes.start("leader", [sys.executable, "-c", code], tmp_path / "leader.log")
    assert leader.wait(timeout=60) == 0
    orphan = int(pid_file.read_text())
    assert processes.alive(orphan)
    assert processes.stop(leader.pid) is True
    deadline = time.monotonic() + 10
    while processes.alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes.alive(orphan)
    assert processes.stop(leader.pid) is False  # nothing left to stop
