"""The real vLLM engine end to end: gRPC request -> vLLM -> ModelCall on Kafka, and an in-place hot-swap.

Two engine starts in all (one per version), shared by the module. Logprobs are compared with a plain
forward pass of the weights the record names, which proves the version label as well as the values.
"""

import grpc
import pytest

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from tests.conftest import stored_key
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    read_topic,
    reference_logprobs,
    register_version,
    serving_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]



@pytest.fixture(scope="module")
def vllm_server(stack, tiny_policy_dir, second_policy_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    config = serving_config(module_topics(stack, f"vllm-{tmp.name}"), tmp, f"vllm-{tmp.name}", engine="vllm",
                            probation_s=1.0, min_swap_interval_s=3600.0)
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    second = register_version(config, second_policy_dir)
    with ServerThread(config) as server:
        server.second_version = second
        yield server


def _generate(channel, session, seed):
    stub = serving_pb2_grpc.PolicyServiceStub(channel)
    request = serving_pb2.GenerateRequest(prompt="fix the file", session_id=session,
                                          sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=6, seed=seed))
    return stub.Generate(request, metadata=((names.META_AGENT_ROLE, "orchestrator"),), timeout=120)


def _recorded(server, session, count):
    config = server.server.config
    assert server.server.recorder.flush(30)
    mine = lambda records: [r for r in records if _keyed_by(config, r, session)]  # noqa: E731
    records = read_topic(config, config.kafka.model_calls_topic, expect=1000, until=lambda got: len(mine(got)) >= count)
    return [model_call_pb2.ModelCall.FromString(r.value) for r in mine(records)]


def test_grpc_to_vllm_to_kafka_with_exact_logprobs(vllm_server, tiny_policy_dir):
    with grpc.insecure_channel(vllm_server.grpc_target) as channel:
        response = _generate(channel, "s-vllm-1", seed=5)
        again = _generate(channel, "s-vllm-1", seed=5)
        chunks = list(serving_pb2_grpc.PolicyServiceStub(channel).GenerateStream(
            serving_pb2.GenerateRequest(prompt="fix the file", session_id="s-vllm-1",
                                        sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=6, seed=5)),
            timeout=120))
        info = serving_pb2_grpc.PolicyServiceStub(channel).ModelInfo(serving_pb2.ModelInfoRequest(), timeout=10)
    assert info.engine == "vllm" and info.policy_version == "1"
    assert response.policy_version == "1" and 1 <= len(response.token_ids) == len(response.logprobs)
    assert list(again.token_ids) == list(response.token_ids)  # seeded sampling repeats
    assert [t for c in chunks for t in c.token_ids] == list(response.token_ids)

    calls = _recorded(vllm_server, "s-vllm-1", 3)
    assert len(calls) == 3
    call = next(c for c in calls if c.request_id == response.request_id)
    assert call.policy_version == "1" and call.agent_role == common_pb2.AGENT_ROLE_ORCHESTRATOR
    assert list(call.completion_token_ids) == list(response.token_ids)
    expected = reference_logprobs(tiny_policy_dir, list(call.prompt_token_ids), list(call.completion_token_ids))
    assert list(call.completion_logprobs) == pytest.approx(expected, abs=1e-3)


def test_force_swap_updates_the_vllm_engine_in_place(vllm_server, tiny_policy_dir, second_policy_dir):
    first = vllm_server.server.router.champion
    with grpc.insecure_channel(vllm_server.grpc_target) as channel:
        swapped = serving_pb2_grpc.PolicyAdminStub(channel).ForceSwap(
            serving_pb2.SwapRequest(version=vllm_server.second_version), timeout=300)
        response = _generate(channel, "s-vllm-2", seed=5)
    champion = vllm_server.server.router.champion
    assert swapped.ok and swapped.policy_version == "2", swapped.message
    assert "(in_place)" in swapped.message
    assert champion.engine is first.engine  # no second engine was started
    assert vllm_server.call(champion.engine.weight_version()) == "2"
    assert response.policy_version == "2"
    call = next(c for c in _recorded(vllm_server, "s-vllm-2", 1) if c.request_id == response.request_id)
    tokens = list(call.completion_token_ids)
    assert list(call.completion_logprobs) == pytest.approx(
        reference_logprobs(second_policy_dir, list(call.prompt_token_ids), tokens), abs=1e-3)
    assert list(call.completion_logprobs) != pytest.approx(
        reference_logprobs(tiny_policy_dir, list(call.prompt_token_ids), tokens), abs=1e-3)


def _keyed_by(config, record, session: str) -> bool:
    """Whether the record is a call of the session, keyed as sealed records are (the session's pseudonym)."""
    call = model_call_pb2.ModelCall.FromString(record.value)
    return call.session_id == session and record.key == stored_key(config, call.tenant_id, session)
