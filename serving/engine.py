"""The engine interface every backend implements: token ids in, sampled token ids and logprobs out.

The server owns text: it tokenizes prompts and decodes completions with the policy's own tokenizer,
so engines only ever see and return token ids. That keeps the recorded ids exactly the ids sampled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters as the engine applies them (and as a ModelCall records them)."""

    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: disabled
    max_tokens: int = 64
    seed: int = 0  # 0: unseeded
    stop: tuple[str, ...] = ()


@dataclass
class Delta:
    """New tokens of one completion since the previous delta; finish_reason is set on the last one."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # sampling logprob of each new token
    finish_reason: str | None = None  # "stop" | "length" on the last delta


class Engine(Protocol):
    """A loaded policy that generates. One instance serves one policy version for its whole life."""

    name: str  # "vllm" or "hf"
    policy_dir: Path

    async def start(self) -> None:
        """Load the weights; may take long, must not block the event loop."""

    def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                 final_only: bool = False) -> AsyncIterator[Delta]:
        """Stream the completion of one prompt. Logprobs are of the distribution sampled from
        (after temperature, top-k and top-p), as vLLM's "processed_logprobs" mode defines them.
        final_only: the caller only wants the whole completion, so an engine may send it as one Delta
        (vLLM then neither builds an output nor wakes the caller per token)."""

    async def shutdown(self) -> None:
        """Free the engine (its process, its memory). Called once no request uses it any more."""

