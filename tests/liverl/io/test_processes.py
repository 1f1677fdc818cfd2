"""Starting and stopping processes: a group stops with what its leader left behind (a vLLM engine core outlives a
killed server), and a server's port block avoids the ports the OS hands to outgoing connections."""

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


def test_a_port_block_lies_outside_the_ephemeral_range_and_is_free():
    """Outgoing connections take ephemeral ports at any moment: a server's block must not be among them."""
    low, high = processes.ephemeral_port_range()
    assert low <= high
    for _ in range(50):
        base = processes.free_port_block(8, spread=10_000)
        for first in (base, base + 10_000):
            assert first + 7 < low or first > high
            assert not any(processes.port_open("127.0.0.1", port) for port in range(first, first + 8))


def test_no_port_is_handed_out_twice_and_parallel_workers_draw_from_disjoint_slices(monkeypatch):
    singles = [processes.free_port() for _ in range(300)]
    assert len(set(singles)) == len(singles)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(processes._port_pool()))
        base = processes.free_port_block(8, spread=10_000)  # the embedded S3 server's block fits in a slice
        assert {base, base + 7, base + 10_000, base + 10_007} <= slices[-1]
        assert processes.free_port() in slices[-1]
    assert slices[0] and slices[1] and not slices[0] & slices[1]


def test_a_log_tail_brings_the_root_cause_from_above_the_last_lines(tmp_path):
    log = tmp_path / "serve.log"
    worker = ["(Worker pid=7) ERROR worker failed to start", "Traceback (most recent call last):",
              '  File "w.py", line 1, in init', "OSError: [Errno 98] Address already in use"]
    log.write_text("\n".join(["starting", *worker, *[f"  engine frame {i}" for i in range(30)],
                              "Exception: WorkerProc initialization failed"]) + "\n")
    said = processes.log_tail(log, lines=5)
    assert said.splitlines()[:3] == ["(earlier errors)", worker[0], worker[3]]
    assert said.splitlines()[-1] == "Exception: WorkerProc initialization failed"
    assert "starting" not in said and "engine frame 25" not in said
    log.write_text("one\ntwo\nRuntimeError: late\n")
    assert processes.log_tail(log, lines=5) == "one\ntwo\nRuntimeError: late"  # nothing above the tail: the tail alone
    assert processes.log_tail(tmp_path / "absent.log") == "(no log)"
