"""gRPC PolicyService end to end: a real server, the real registry, records read back from the broker."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from tests.conftest import stored_key
from tests.serving.conftest import read_topic

AUTH = (("authorization", "Bearer user-key"),)
META = AUTH + ((names.META_SESSION_ID, "s-grpc"), (names.META_AGENT_ROLE, "subagent"), (names.META_AGENT_ID, "sub-1"))


def _stub(server):
    channel = grpc.insecure_channel(server.grpc_target)
    return channel, serving_pb2_grpc.PolicyServiceStub(channel)


def test_generate_returns_tokens_logprobs_and_version_and_is_recorded(api_server):
    channel, stub = _stub(api_server)
    with channel:
        request = serving_pb2.GenerateRequest(prompt="fix the file", request_id="grpc-req-1",
                                              sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=5,
                                                                                 seed=7))
        response, call = stub.Generate.with_call(request, metadata=META, timeout=60)
        info = stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=AUTH, timeout=10)
    assert response.policy_version == "1" == info.policy_version
    assert dict(call.trailing_metadata())[names.META_POLICY_VERSION] == "1"
    assert 1 <= len(response.token_ids) == len(response.logprobs) <= 5
    assert all(lp <= 0 for lp in response.logprobs)
    assert info.engine == "hf" and info.alias == names.ALIAS_CHAMPION

    config = api_server.server.config
    assert api_server.server.recorder.flush(30)
    records = [r for r in read_topic(config, config.kafka.model_calls_topic, expect=1000,
                                     until=lambda got: any(b"grpc-req-1" in r.value for r in got))
               if r.key == stored_key(config, "acme", "s-grpc")]  # user-key is acme's
    calls = [model_call_pb2.ModelCall.FromString(r.value) for r in records]
    mine = [c for c in calls if c.request_id == "grpc-req-1"]
    assert len(mine) == 1
    recorded = mine[0]
    assert recorded.policy_version == "1" and recorded.api == "grpc"
    assert recorded.agent_role == common_pb2.AGENT_ROLE_SUBAGENT and recorded.agent_id == "sub-1"
    assert list(recorded.completion_token_ids) == list(response.token_ids)
    assert list(recorded.completion_logprobs) == pytest.approx(list(response.logprobs))
    assert list(recorded.prompt_token_ids) == list(response.prompt_token_ids)
    assert recorded.sampling.seed == 7 and recorded.sampling.max_tokens == 5
    assert recorded.schema_version == names.EVENT_SCHEMA_VERSION and recorded.event_id
    headers = dict(records[0].headers)
    assert headers[names.HEADER_KIND] == b"model-call" and headers[names.HEADER_SCHEMA_VERSION] == b"1"


def test_stream_chunks_add_up_to_the_completion(api_server):
    channel, stub = _stub(api_server)
    with channel:
        request = serving_pb2.GenerateRequest(prompt_token_ids=[2, 60, 61],
                                              sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=6,
                                                                                 seed=3))
        stream = stub.GenerateStream(request, metadata=META, timeout=60)
        first_metadata = dict(stream.initial_metadata())  # a stream names its version before the first chunk
        chunks = list(stream)
        whole = stub.Generate(request, metadata=META, timeout=60)
    assert first_metadata[names.META_POLICY_VERSION] == "1" and first_metadata[names.META_SESSION_ID] == "s-grpc"
    assert whole.session_id == "s-grpc"
    assert chunks[-1].finish_reason in ("stop", "length")
    assert [t for c in chunks for t in c.token_ids] == list(whole.token_ids)  # same seed, same tokens
    assert "".join(c.text for c in chunks) == whole.text
    assert {c.policy_version for c in chunks} == {"1"}


def test_bad_requests_are_refused_clearly_and_dead_lettered(api_server):
    import json

    channel, stub = _stub(api_server)
    with channel:
        with pytest.raises(grpc.RpcError) as empty:
            stub.Generate(serving_pb2.GenerateRequest(prompt=""), metadata=META, timeout=10)
        with pytest.raises(grpc.RpcError) as bad_role:
            stub.Generate(serving_pb2.GenerateRequest(prompt="fix"),
                          metadata=AUTH + ((names.META_AGENT_ROLE, "boss"),), timeout=10)
        with pytest.raises(grpc.RpcError) as too_long:
            stub.Generate(serving_pb2.GenerateRequest(prompt="fix " * 600), metadata=META, timeout=10)
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "empty" in empty.value.details()
    assert bad_role.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "boss" in bad_role.value.details()
    assert too_long.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in too_long.value.details()

    config = api_server.server.config
    api_server.server.recorder.flush(30)
    wanted = {b"empty-prompt", b"bad-agent-role", b"too-long"}
    letters = [json.loads(r.value) for r in read_topic(
        config, config.kafka.dead_letters_topic, expect=1000,
        until=lambda got: all(any(w in r.value for r in got) for w in wanted))]
    reasons = {d["reason"] for d in letters if d["source"] == "serving"}
    assert {"empty-prompt", "bad-agent-role", "too-long"} <= reasons
    assert api_server.server.metrics.value("liverl_serving_dead_letters_total", {"reason": "empty-prompt"}) >= 1


def test_keys_guard_generate_and_admin_but_not_health(api_server):
    channel, stub = _stub(api_server)
    with channel:
        with pytest.raises(grpc.RpcError) as no_key:
            stub.Generate(serving_pb2.GenerateRequest(prompt="fix"), timeout=10)
        with pytest.raises(grpc.RpcError) as stream_no_key:
            list(stub.GenerateStream(serving_pb2.GenerateRequest(prompt="fix"), timeout=10))
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        with pytest.raises(grpc.RpcError) as user_key_on_admin:
            admin.Rollback(serving_pb2.RollbackRequest(reason="x"), metadata=AUTH, timeout=10)
        refused = admin.Rollback(serving_pb2.RollbackRequest(reason="x"),
                                 metadata=(("authorization", "Bearer admin-key"),), timeout=10)
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert no_key.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stream_no_key.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert user_key_on_admin.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not refused.ok and "previous" in refused.message  # nothing to roll back to, said plainly
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services(api_server):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(api_server.grpc_target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                 timeout=10))
    listed = {s.name for s in replies[0].list_services_response.service}
    assert {"liverl.v1.PolicyService", "liverl.v1.PolicyAdmin", "grpc.health.v1.Health"} <= listed
