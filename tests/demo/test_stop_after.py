"""The demo's traffic ends on a count of served trained versions, whatever the machine's speed."""

import threading
from types import SimpleNamespace

from demo.stop_after import StopAfterVersions


def served(version: str):
    return SimpleNamespace(served_version=version)


def test_stops_once_the_nth_version_after_the_first_served_a_session():
    stop, lines = threading.Event(), []
    rule = StopAfterVersions(2, stop, lines.append)
    for version in ["1", "1", "2", "2", "1"]:  # the first served version never counts, nor a repeat
        rule.on_session(served(version))
    assert not stop.is_set() and rule.swapped == ["2"]
    rule.on_session(served("4"))
    assert stop.is_set() and rule.swapped == ["2", "4"]
    assert len(lines) == 1 and "v2, v4" in lines[0] and "demo.run.stop_after_versions" in lines[0]
    rule.on_session(served("5"))
    assert len(lines) == 1  # said once


def test_zero_never_stops():
    stop = threading.Event()
    rule = StopAfterVersions(0, stop, lambda line: None)
    for version in ["1", "2", "3", "4"]:
        rule.on_session(served(version))
    assert not stop.is_set() and rule.swapped == ["2", "3", "4"]


def test_sessions_finishing_on_many_threads_count_each_version_once():
    stop, lines = threading.Event(), []
    rule = StopAfterVersions(3, stop, lines.append)
    rule.on_session(served("1"))

    def finish():
        for version in ["2", "3", "4", "2", "3", "4"] * 50:
            rule.on_session(served(version))

    threads = [threading.Thread(target=finish) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert stop.is_set() and sorted(rule.swapped) == ["2", "3", "4"] and len(lines) == 1
