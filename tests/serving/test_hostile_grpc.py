"""Hostile and careless clients against a running server's gRPC API (the light engine, loopback only).

The same contract as HTTP: valid requests are served, every invalid one is refused with
INVALID_ARGUMENT (PERMISSION_DENIED for another tenant, UNAUTHENTICATED without a key,
RESOURCE_EXHAUSTED past the size or rate limits) and counted; no input yields INTERNAL or UNKNOWN.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liverl.contracts import names
from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc
from tests.serving.conftest import rejected_total

AUTH = (("authorization", "Bearer acme-key"),)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
COUNTS = {"tried": 0, "rejected": 0, "served": 0}
SERVER_ERRORS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE}

# (value, inside the contract?) per field; proto3 zeros mean "default" (see serving.grpc_api).
PROMPTS = [(("fix the file", []), True), (("", [2, 60, 61]), True), (("", []), False), (("   ", []), False),
           (("fix", [2]), False), (("fix " * 600, []), False), (("", [-1]), False), (("", [10**6]), False),
           (("", [1] * 600), False), (("x" * 2_050_000, []), False)]
SAMPLING = {
    "temperature": [(0.0, True), (0.5, True), (2.0, True), (0.01, True), (0.005, False), (-1.0, False), (2.5, False),
                    (float("nan"), False), (float("inf"), False)],
    "top_p": [(0.0, True), (0.5, True), (1.0, True), (-0.5, False), (1.5, False), (float("nan"), False)],
    "top_k": [(0, True), (-1, True), (5, True), (-2, False), (-(2**31), False)],
    "max_tokens": [(0, True), (1, True), (6, True), (-1, False), (100_000, False)],
    "seed": [(0, True), (3, True), (-(2**63), True), (2**63 - 1, True)],
    "stop": [([], True), (["done"], True), ([""], False), (["a"] * 5, False), (["x" * 300], False)],
}
FIELDS = {
    "agent_role": [(0, True), (common_pb2.AGENT_ROLE_SUBAGENT, True), (7, False)],
    "session_id": [("", True), ("s-grpc-hostile", True), ("x" * 300, False), ("bad\x01id", False)],
    "request_id": [("", True), ("r" * 300, False)],
}
METADATA = [((), True), (((names.META_AGENT_ROLE, "single"),), True), (((names.META_TENANT, "acme"),), True),
            (((names.META_AGENT_ROLE, "boss"),), False)]


def _valid_or_any(choices):
    return st.one_of(st.sampled_from([c for c in choices if c[1]]), st.sampled_from(choices))


@pytest.fixture(scope="module")
def stub(hostile_server):
    with grpc.insecure_channel(hostile_server.grpc_target, options=[
            ("grpc.max_send_message_length", 8 << 20)]) as channel:
        yield serving_pb2_grpc.PolicyServiceStub(channel)


@SETTINGS
@given(prompt=_valid_or_any(PROMPTS), sampling=st.one_of(st.none(), st.fixed_dictionaries(
    {k: _valid_or_any(v) for k, v in SAMPLING.items()})), fields=st.fixed_dictionaries(
    {k: _valid_or_any(v) for k, v in FIELDS.items()}), metadata=_valid_or_any(METADATA),
    streaming=st.booleans())
def test_generate_serves_the_valid_and_refuses_the_invalid(hostile_server, stub, prompt, sampling, fields, metadata,
                                                           streaming):
    (text, ids), valid = prompt
    request = serving_pb2.GenerateRequest(prompt=text, prompt_token_ids=ids,
                                          **{k: v for k, (v, ok) in fields.items()})
    valid = valid and all(ok for _, ok in fields.values()) and metadata[1]
    if sampling is not None:
        request.sampling.CopyFrom(common_pb2.SamplingParams(**{k: v for k, (v, _) in sampling.items()}))
        valid = valid and all(ok for _, ok in sampling.values())
    before = rejected_total(hostile_server)
    COUNTS["tried"] += 1
    try:
        if streaming:
            chunks = list(stub.GenerateStream(request, metadata=AUTH + metadata[0], timeout=60))
            tokens = [t for c in chunks for t in c.token_ids]
        else:
            tokens = list(stub.Generate(request, metadata=AUTH + metadata[0], timeout=60).token_ids)
        code = grpc.StatusCode.OK
    except grpc.RpcError as error:
        code, details = error.code(), error.details()
    assert code not in SERVER_ERRORS
    if valid:
        COUNTS["served"] += 1
        assert code == grpc.StatusCode.OK and tokens
        assert rejected_total(hostile_server) == before
    else:
        COUNTS["rejected"] += 1
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details, (request, metadata)
        assert rejected_total(hostile_server) == before + 1


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_undecodable_messages_are_invalid_arguments(hostile_server, raw):
    with grpc.insecure_channel(hostile_server.grpc_target) as channel:
        generate = channel.unary_unary("/liverl.v1.PolicyService/Generate")  # bytes in, bytes out
        COUNTS["tried"] += 1
        try:
            generate(raw, metadata=AUTH, timeout=60)
            COUNTS["served"] += 1
        except grpc.RpcError as error:
            COUNTS["rejected"] += 1
            assert error.code() not in SERVER_ERRORS, error.details()


def test_tenancy_auth_and_size_limits(hostile_server, stub):
    request = serving_pb2.GenerateRequest(prompt="fix", sampling=common_pb2.SamplingParams(max_tokens=2))
    metrics = hostile_server.server.metrics
    before = metrics.value("liverl_serving_cross_tenant_refusals_total", {"tenant": "acme"})
    with pytest.raises(grpc.RpcError) as other_tenant:
        stub.Generate(request, metadata=AUTH + ((names.META_TENANT, "globex"),), timeout=30)
    with pytest.raises(grpc.RpcError) as role:
        stub.Generate(request, metadata=(("authorization", "Bearer acme-sub-key"),
                                         (names.META_AGENT_ROLE, "orchestrator")), timeout=30)
    with pytest.raises(grpc.RpcError) as no_key:
        stub.Generate(request, timeout=30)
    with pytest.raises(grpc.RpcError) as too_big:
        stub.Generate(serving_pb2.GenerateRequest(prompt="x" * (3 << 20)), metadata=AUTH, timeout=30)
    assert other_tenant.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert role.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert no_key.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert metrics.value("liverl_serving_cross_tenant_refusals_total", {"tenant": "acme"}) == before + 1
    assert stub.Generate(request, metadata=(("authorization", "Bearer globex-key"),
                                            (names.META_TENANT, "globex")), timeout=30).token_ids
    print(f"\nhostile gRPC suite: {COUNTS['tried']} cases tried, {COUNTS['rejected']} rejected, "
          f"{COUNTS['served']} served")
