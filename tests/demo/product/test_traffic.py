import threading
import time

import pytest

from demo.product.local_policy import LocalPolicy
from demo.product.memory_recorder import MemoryRecorder
from demo.product.traffic import run_traffic
from liverl.v1 import common_pb2
from tests.conftest import opened


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

    recorder = MemoryRecorder()
    stats = run_traffic(Unreachable(), recorder, n_sessions=3, seed=0, feedback_delay_s=0)
    assert stats.sessions == [] and len(stats.errors) == 3 and "serving is down" in stats.errors[0]
    ends = [e.fields["reason"] for e in recorder.events if e.kind == "session_end"]
    assert ends == ["error"] * 3  # every session is still closed, so the pipelines can finish it


def test_stop_event_and_bad_arguments():
    stop = threading.Event()
    stop.set()
    assert run_traffic(object(), MemoryRecorder(), stop=stop).sessions == []
    with pytest.raises(ValueError, match="never ends"):
        run_traffic(object(), MemoryRecorder())
    with pytest.raises(ValueError, match="unknown task families"):
        run_traffic(object(), MemoryRecorder(), n_sessions=1, families=("chess",))


def read_session_events(config, want: int, timeout_s: float = 30.0) -> list:
    """Every SessionEvent on the test's topic once `want` arrived (assign + poll: no group rebalances)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    from liverl.v1 import session_event_pb2

    topic = config.kafka.session_events_topic
    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []])
        consumer.seek_to_beginning()
        events, deadline = {}, time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(events) < want:
            for batch in consumer.poll(timeout_ms=500).values():
                for record in opened(config, batch):
                    event = session_event_pb2.SessionEvent.FromString(record.value)
                    events[event.event_id] = event  # the capture path may redeliver: dedupe on event id
        return list(events.values())
    finally:
        consumer.close()


def test_traffic_recorded_through_the_real_capture_service(demo_base_policy, capture_service, tmp_path):
    from demo.config import DemoLiverlConfig
    from demo.product.configured import capture_client, run_configured_traffic

    config = DemoLiverlConfig.model_validate(capture_service.model_dump())
    config.demo.run.feedback_delay_s = 0.2
    client = capture_client(config, tmp_path / "sdk-spool")
    try:
        stats = run_configured_traffic(config, LocalPolicy(demo_base_policy, version="1", seed=2), client, n_sessions=6)
        assert client.flush(timeout_s=30)
        recorded = client.stats()
    finally:
        client.close()
    assert stats.errors == [] and len(stats.sessions) == 6
    events = read_session_events(config, want=recorded["sent"])
    assert len(events) == recorded["sent"] > 0
    by_session = {}
    for event in events:
        by_session.setdefault(event.session_id, []).append(event)
    assert set(by_session) == {s.session_id for s in stats.sessions}
    bodies = {e.WhichOneof("body") for e in events}
    assert {"session_start", "user_message", "tool_call", "tool_result", "outcome", "session_end"} <= bodies
    for session in stats.sessions:
        start = next(e for e in by_session[session.session_id] if e.WhichOneof("body") == "session_start")
        assert start.session_start.task_family == session.family and start.tenant_id == "demo"
        if session.family == "search":
            assert start.session_start.token_budget > 0
        if session.family == "orchestrator":
            assert start.agent_role == common_pb2.AGENT_ROLE_ORCHESTRATOR
    assert stats.feedback_sent == sum(e.WhichOneof("body") == "feedback" for e in events)


def test_sessions_arrive_at_the_configured_rate(demo_base_policy):
    rate = 10.0
    called = time.time()
    stats = run_traffic(LocalPolicy(demo_base_policy, version="1", seed=0), MemoryRecorder(), n_sessions=5, seed=2,
                        concurrency=5, feedback_delay_s=0, sessions_per_s=rate)
    starts = sorted(s.started_at for s in stats.sessions)
    # Five free slots, yet no session starts before its arrival, k / rate after the traffic began: the k-th start
    # is at least that late. (Not the gaps between starts: a session's thread started late on a busy machine makes
    # the next gap short without any session arriving early.)
    assert all(start - called >= k / rate - 0.01 for k, start in enumerate(starts)), [s - called for s in starts]


class ScriptedChat:
    """An HttpChatPolicy look-alike: every reply asks two sub-questions (a well-sized split for the orchestrator)."""

    def __init__(self):
        self.roles = []

    def chat(self, messages, max_tokens, session_id, agent_role, agent_id="main"):
        from demo.product.http_policy import ChatCompletion

        self.roles.append(agent_role)
        return ChatCompletion(text="Who built it?\nWhere is it?", request_id=f"r-{len(self.roles)}",
                              policy_version="3", completion_tokens=9, finish_reason="stop")


class ScriptedHelpers:
    def answer(self, requests, seeds):
        return ["no idea"] * len(requests)


def test_with_frozen_helpers_the_traffic_plays_the_chat_tasks_of_every_family():
    policy, recorder = ScriptedChat(), MemoryRecorder()
    stats = run_traffic(policy, recorder, n_sessions=3, seed=0, feedback_delay_s=0.0, helpers=ScriptedHelpers())
    assert not stats.errors and sorted(s.family for s in stats.sessions) == ["coding", "orchestrator", "search"]
    assert all(s.task_id.startswith("real-") and s.served_version == "3" and s.calls == 1 for s in stats.sessions)
    orchestrated = next(s for s in stats.sessions if s.family == "orchestrator")
    assert orchestrated.subagent_calls == 2, "each sub-question went to a frozen helper, not to the policy"
    assert "subagent" not in policy.roles
    kinds = {e.kind for e in recorder.events if e.session_id == orchestrated.session_id}
    assert {"session_start", "tool_call", "subagent_created", "subagent_finished", "outcome", "session_end"} <= kinds
