"""The coding task's sandbox: model-written code runs limited, isolated and offline, and passes only by finishing."""

from __future__ import annotations

import socket
import threading

from demo.product.tasks.chat.sandbox import SandboxLimits, run_tests

TESTS = "assert double(2) == 4\nassert double(-1) == -2\n"
QUICK = SandboxLimits(wall_s=4.0, cpu_s=2, memory_mb=256)


def test_right_code_passes_and_wrong_code_fails_with_the_assertion():
    assert run_tests("def double(x):\n    return 2 * x\n", TESTS, QUICK).passed
    wrong = run_tests("def double(x):\n    return x + 2\n", TESTS, QUICK)
    assert not wrong.passed and wrong.reason.startswith("AssertionError")


def test_an_infinite_loop_is_killed_within_the_wall_limit():
    result = run_tests("while True:\n    pass\n", TESTS, QUICK)
    assert not result.passed and result.reason in ("timeout", "cpu limit")


def test_a_sleeping_loop_is_killed_by_the_wall_clock():
    result = run_tests("import time\nwhile True:\n    time.sleep(1)\n", TESTS, SandboxLimits(wall_s=1.5))
    assert (result.passed, result.reason) == (False, "timeout")


def test_a_memory_hog_hits_the_address_space_limit():
    result = run_tests("hog = bytearray(1 << 31)\n", TESTS, QUICK)
    assert (result.passed, result.reason) == (False, "memory limit")


def test_a_network_attempt_is_refused_even_to_a_listening_local_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(6.0)
    waiter = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    waiter.start()
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        result = run_tests(code + "def double(x):\n    return 2 * x\n", TESTS, QUICK)
        assert not result.passed and result.reason.startswith("blocked: socket"), result.reason
        raw = run_tests("import _socket\n_socket.socket().connect(('127.0.0.1', %d))\n" % port, TESTS, QUICK)
        assert not raw.passed and raw.reason.startswith("blocked: socket"), raw.reason
    finally:
        server.close()
        waiter.join(timeout=8)
    assert accepted == [None], "nothing may have connected"


def _accept(server: socket.socket):
    try:
        connection, _ = server.accept()
        connection.close()
        return "connected"
    except OSError:
        return None


def test_subprocesses_file_writes_and_early_exits_do_not_pass():
    for code, reason in (
        ("import subprocess\nsubprocess.run(['true'])\n", "blocked: subprocess.Popen"),
        ("import os\nos.system('true')\n", "blocked: os.system"),
        ("open('/tmp/liverl-sandbox-escape', 'w')\n", "blocked: open"),
        ("import os\nos._exit(0)\n", "exited before the tests finished"),
        ("import sys\nsys.exit(0)\n", "exited before the tests finished"),
    ):
        result = run_tests(code + "def double(x):\n    return 2 * x\n", TESTS, QUICK)
        assert not result.passed and result.reason.startswith(reason), (code, result.reason)


def test_runs_isolated_in_a_temporary_folder_without_the_callers_environment(monkeypatch):
    monkeypatch.setenv("LIVERL_SECRET", "x")
    code = ("import os, sys\nassert 'LIVERL_SECRET' not in os.environ\nassert sys.flags.isolated\n"
            "assert os.path.basename(os.getcwd()).startswith('liverl-sandbox-')\n"
            "assert not any('site-packages' in p for p in sys.path)\n"
            "def double(x):\n    return 2 * x\n")
    result = run_tests(code, TESTS, QUICK)
    assert result.passed, result.reason
