import threading

import pytest

from demo.product.local_policy import LocalPolicy
from demo.product.memory_recorder import MemoryRecorder
from demo.product.traffic import run_traffic


def test_local_policy_traffic_over_every_family(demo_base_policy):
    recorder = MemoryRecorder()
    seen = []
    stats = run_traffic(LocalPolicy(demo_base_policy, version="1", seed=0), recorder, n_sessions=9, seed=1,
                        concurrency=2, feedback_delay_s=0.05, on_session=seen.append)
    assert stats.errors == [] and len(stats.sessions) == 9 and len(seen) == 9
    assert {s.family for s in stats.sessions} == {"coding", "search", "orchestrator"}
    assert all(0.0 <= s.reward <= 1.0 and s.served_version == "1" and s.ended_at >= s.started_at
               for s in stats.sessions)
    assert set(stats.mean_reward_by_version()) == {"1"}
    starts = [e for e in recorder.events if e.kind == "session_start"]
    ends = [e for e in recorder.events if e.kind == "session_end"]
    assert len(starts) == len(ends) == 9
    assert stats.feedback_sent == sum(e.kind == "feedback" for e in recorder.events) and stats.feedback_failed == 0


def test_a_failing_policy_is_counted_not_fatal():
    class Unreachable:
        def generate(self, *args, **kwargs):
            raise ConnectionError("serving is down")

    stats = run_traffic(Unreachable(), MemoryRecorder(), n_sessions=3, seed=0, feedback_delay_s=0)
    assert stats.sessions == [] and len(stats.errors) == 3 and "serving is down" in stats.errors[0]


def test_stop_event_and_bad_arguments():
    stop = threading.Event()
    stop.set()
    assert run_traffic(object(), MemoryRecorder(), stop=stop).sessions == []
    with pytest.raises(ValueError, match="never ends"):
        run_traffic(object(), MemoryRecorder())
    with pytest.raises(ValueError, match="unknown task families"):
        run_traffic(object(), MemoryRecorder(), n_sessions=1, families=("chess",))
