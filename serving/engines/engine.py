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


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter version as an engine serves it. Every registry version gets a name and an id of its own:
    vLLM keys prefix-cache blocks by adapter name, so no block computed under another version is reused."""

    name: str  # unique per version and load, e.g. "liverl-v7-3"
    lora_id: int  # vLLM's lora_int_id: >= 1, unique per name
    path: Path  # the peft adapter folder (liverl.contracts.adapter)
    version: str  # the adapter's registry version
    base_version: str  # the registry version of the full weights it applies to


class Engine(Protocol):
    """A loaded policy that generates. One instance serves one policy version for its whole life."""

    name: str  # "vllm" or "hf"
    policy_dir: Path

    async def start(self) -> None:
        """Load the weights; may take long, must not block the event loop."""

    def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                 final_only: bool = False, adapter: Adapter | None = None) -> AsyncIterator[Delta]:
        """Stream the completion of one prompt. Logprobs are of the distribution sampled from
        (after temperature, top-k and top-p), as vLLM's "processed_logprobs" mode defines them.
        final_only: the caller only wants the whole completion, so an engine may send it as one Delta
        (vLLM then neither builds an output nor wakes the caller per token).
        adapter: run under this LoRA adapter (loaded first with load_adapter); None: the base weights."""

    async def load_adapter(self, adapter: Adapter) -> dict:
        """Load a LoRA adapter into the running engine, so its first request pays no load; returns the timings.
        Raises (nothing changed) when the adapter does not fit the engine's weights or LoRA settings."""

    async def unload_adapter(self, adapter: Adapter) -> None:
        """Free an adapter no version uses any more (a no-op when it is not loaded)."""

    def has_adapter(self, adapter: Adapter) -> bool:
        """Whether the adapter is loaded now (a weight update drops vLLM's)."""

    def failure(self) -> str | None:
        """Why the engine can no longer serve (its process died), or None while it can."""

    async def shutdown(self) -> None:
        """Free the engine (its process, its memory). Called once no request uses it any more."""

