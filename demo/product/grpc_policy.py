"""The policy behind serving's gRPC PolicyService (docs/architecture.md, contract 5), as the demo product calls it."""

from __future__ import annotations

import uuid

from demo.product.policy import MAIN_AGENT_ID, ROLE_ORCHESTRATOR, ROLE_SINGLE, ROLE_SUBAGENT, Completion
from liverl.contracts import names

_ROLE_ENUM_NAMES = {
    ROLE_SINGLE: "AGENT_ROLE_SINGLE",
    ROLE_ORCHESTRATOR: "AGENT_ROLE_ORCHESTRATOR",
    ROLE_SUBAGENT: "AGENT_ROLE_SUBAGENT",
}


class GrpcPolicy:
    """One channel shared by every session (gRPC channels are thread-safe)."""

    def __init__(
        self,
        target: str,
        *,
        api_key: str = "",
        temperature: float = 1.0,
        max_new_tokens: int = 8,
        timeout_s: float = 30.0,
    ) -> None:
        import grpc

        from liverl.v1 import serving_pb2_grpc

        self._channel = grpc.insecure_channel(target)
        self._stub = serving_pb2_grpc.PolicyServiceStub(self._channel)
        self._api_key = api_key
        self._temperature = temperature
        self._max_new_tokens = max_new_tokens
        self._timeout_s = timeout_s

    def generate(
        self, prompt_text: str, session_id: str, agent_role: str = ROLE_SINGLE, agent_id: str = MAIN_AGENT_ID
    ) -> Completion:
        from liverl.v1 import common_pb2, serving_pb2

        if agent_role not in _ROLE_ENUM_NAMES:
            raise ValueError(f"agent_role {agent_role!r} is not one of {sorted(_ROLE_ENUM_NAMES)}")
        request = serving_pb2.GenerateRequest(
            prompt=prompt_text,
            sampling=common_pb2.SamplingParams(
                temperature=self._temperature, top_p=1.0, max_tokens=self._max_new_tokens
            ),
            session_id=session_id,
            agent_role=common_pb2.AgentRole.Value(_ROLE_ENUM_NAMES[agent_role]),
            agent_id=agent_id,
            request_id=f"demo-{uuid.uuid4().hex}",
        )
        metadata = [
            (names.META_SESSION_ID, session_id),
            (names.META_AGENT_ROLE, agent_role),
            (names.META_AGENT_ID, agent_id),
        ]
        if self._api_key:
            metadata.append(("authorization", f"Bearer {self._api_key}"))
        response = self._stub.Generate(request, metadata=metadata, timeout=self._timeout_s)
        return Completion(
            text=response.text,
            token_ids=tuple(response.token_ids),
            logprobs=tuple(response.logprobs),
            policy_version=response.policy_version,
            request_id=response.request_id or request.request_id,
            prompt_token_ids=tuple(response.prompt_token_ids),
            finish_reason=response.finish_reason,
        )

    def close(self) -> None:
        self._channel.close()
