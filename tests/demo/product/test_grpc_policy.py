"""GrpcPolicy against a real gRPC server speaking PolicyService (docs/architecture.md, contract 5); it echoes
what it got.

Serving's own engine is tested in tests/serving; here only the product's side of the contract:
request fields, metadata names, the bearer key, and the response mapped into a Completion.
"""

from concurrent import futures

import grpc
import pytest

from demo.product.grpc_policy import GrpcPolicy
from liverl.contracts import names
from liverl.io.processes import free_port
from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc


class EchoPolicyService(serving_pb2_grpc.PolicyServiceServicer):
    def __init__(self):
        self.seen = []

    def Generate(self, request, context):
        metadata = dict(context.invocation_metadata())
        if metadata.get("authorization") != "Bearer k1":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong API key")
        self.seen.append((request, metadata))
        return serving_pb2.GenerateResponse(
            request_id=request.request_id, text="done", token_ids=[9, 3], logprobs=[-0.1, -0.2],
            policy_version="4", finish_reason="stop", prompt_token_ids=[1, 2],
        )


@pytest.fixture
def echo_server():
    service = EchoPolicyService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    serving_pb2_grpc.add_PolicyServiceServicer_to_server(service, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    yield f"127.0.0.1:{port}", service
    server.stop(grace=None)


def test_generate_sends_session_role_agent_and_key(echo_server):
    target, service = echo_server
    policy = GrpcPolicy(target, api_key="k1", max_new_tokens=8)
    completion = policy.generate("subagent do part_1 :", "sess-1", "subagent", "sub-2")
    policy.close()
    request, metadata = service.seen[0]
    assert metadata[names.META_SESSION_ID] == "sess-1"
    assert metadata[names.META_AGENT_ROLE] == "subagent" and metadata[names.META_AGENT_ID] == "sub-2"
    assert request.session_id == "sess-1" and request.agent_role == common_pb2.AGENT_ROLE_SUBAGENT
    assert request.sampling.max_tokens == 8 and request.sampling.temperature == 1.0
    assert completion.text == "done" and completion.policy_version == "4"
    assert completion.token_ids == (9, 3) and completion.logprobs == pytest.approx((-0.1, -0.2))
    assert completion.request_id == request.request_id and completion.prompt_token_ids == (1, 2)


def test_a_wrong_key_or_role_fails_loudly(echo_server):
    target, _ = echo_server
    policy = GrpcPolicy(target, api_key="wrong")
    with pytest.raises(grpc.RpcError) as error:
        policy.generate("done :", "s", "single", "main")
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(ValueError, match="agent_role"):
        policy.generate("done :", "s", "boss", "main")
    policy.close()
