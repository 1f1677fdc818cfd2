"""How the product talks to its policy: one completion per call, with the version that served it.

Implementations: GrpcPolicy (serving's PolicyService, what the demo uses) and LocalPolicy (a HF folder
in process, for the held-out evaluator and tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

ROLE_SINGLE = "single"
ROLE_ORCHESTRATOR = "orchestrator"
ROLE_SUBAGENT = "subagent"
MAIN_AGENT_ID = "main"


@dataclass(frozen=True)
class Completion:
    """One served completion. Produced by a Policy, consumed by the session runner."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # behaviour logprob of each completion token
    policy_version: str
    request_id: str
    prompt_token_ids: tuple[int, ...] = ()  # empty when the server did not return them
    finish_reason: str = ""


class Policy(Protocol):
    def generate(
        self, prompt_text: str, session_id: str, agent_role: str = ROLE_SINGLE, agent_id: str = MAIN_AGENT_ID
    ) -> Completion: ...
