"""The product on a chat model end to end: chat-task sessions of each family against a real `serving` (hf engine)
on the converted SmolLM2 base, recorded by the real capture service, the helpers answered by the frozen base."""

from __future__ import annotations

import pytest

from liverl.contracts import names
from liverl.v1 import model_call_pb2
from tests.ingest.conftest import events_of
from tests.serving.conftest import ServerThread, read_topic, register_version, serving_config

pytestmark = pytest.mark.slow  # converts the 135M model once and generates on CPU (~2-4 min)

SESSIONS = 3  # one of each family
MAX_TOKENS = 24  # caps every task's own budget: the plumbing is the point here, not the answers' quality


@pytest.fixture
def smollm2_folder(smollm2_converted):
    return smollm2_converted[0]


def test_chat_sessions_reach_serving_and_capture(capture_service, smollm2_folder, tmp_path):
    from demo.product.chat_session import FrozenHelpers
    from demo.product.http_policy import HttpChatPolicy
    from demo.product.traffic import run_traffic
    from ingest.sdk import CaptureClient

    config = serving_config(capture_service, tmp_path, f"real-{tmp_path.name}", max_model_len=1024)
    register_version(config, smollm2_folder, (names.ALIAS_CHAMPION,))
    client = CaptureClient(target=f"{config.ingest.host}:{config.ingest.grpc_port}", token="demo-token",
                           spool_dir=tmp_path / "spool")
    with ServerThread(config) as server:
        policy = HttpChatPolicy(server.http_base, temperature=0.7, top_p=0.9, timeout_s=300,
                                max_tokens_cap=MAX_TOKENS)
        try:
            stats = run_traffic(policy, client, n_sessions=SESSIONS, seed=0, feedback_delay_s=0.0,
                                helpers=FrozenHelpers(smollm2_folder))
        finally:
            policy.close()
        server.server.recorder.flush(30)
    assert client.flush(timeout_s=30)
    client.close()

    assert not stats.errors and len(stats.sessions) == SESSIONS
    assert sorted(s.family for s in stats.sessions) == ["coding", "orchestrator", "search"]
    assert all(s.policy_versions and set(s.policy_versions) == {"1"} for s in stats.sessions)
    ours = {s.session_id for s in stats.sessions}
    policy_calls = sum(s.calls for s in stats.sessions)

    calls = [model_call_pb2.ModelCall.FromString(r.value) for r in read_topic(
        config, config.kafka.model_calls_topic, expect=policy_calls + 1, timeout_s=30)]
    calls = [c for c in calls if c.session_id in ours]
    assert len(calls) == policy_calls, "one ModelCall per policy call, none for the frozen helpers"
    for call in calls:
        assert call.policy_version == "1" and call.api == "openai-chat"
        assert 0 < len(call.completion_token_ids) == len(call.completion_logprobs) <= MAX_TOKENS
        assert list(call.prompt_token_ids), "serving rendered the chat with the policy's template"

    events = events_of(read_topic(config, config.kafka.session_events_topic, expect=10_000, timeout_s=15))
    by_session: dict[str, list] = {}
    for event in events:
        by_session.setdefault(event.session_id, []).append(event)
    assert ours <= set(by_session)
    call_ids = {c.request_id for c in calls}
    for session in stats.sessions:
        kinds = [e.WhichOneof("body") for e in by_session[session.session_id]]
        assert kinds[0] == "session_start" and "session_end" in kinds and "outcome" in kinds
        linked = [e.tool_call.request_id for e in by_session[session.session_id]
                  if e.WhichOneof("body") == "tool_call" and e.agent_id == "main"]
        assert linked and set(linked) <= call_ids, "every tool call of the agent names its ModelCall"
        helpers = [e for e in by_session[session.session_id] if e.WhichOneof("body") == "subagent_created"]
        assert len(helpers) == session.subagent_calls
    feedback = [e for e in events if e.session_id in ours and e.WhichOneof("body") == "feedback"]
    assert len(feedback) == stats.feedback_sent and stats.feedback_failed == 0
