"""A policy in process: samples from a HF folder with transformers, returning per-token logprobs.

For the held-out evaluator and tests; the demo itself calls serving (GrpcPolicy).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from demo.product.policy import MAIN_AGENT_ID, ROLE_SINGLE, Completion


class LocalPolicy:
    """Thread-safe (one sample at a time): the product may run sessions concurrently."""

    def __init__(
        self,
        folder: str | Path,
        *,
        version: str = "local",
        temperature: float = 1.0,
        max_new_tokens: int = 8,
        seed: int = 0,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        self.version = version
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self._generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()

    def reseed(self, seed: int) -> None:
        """Restart the sampler's random stream (the held-out evaluator reseeds per call: common random numbers)."""
        with self._lock:
            self._generator.manual_seed(seed)

    def generate(
        self, prompt_text: str, session_id: str = "", agent_role: str = ROLE_SINGLE, agent_id: str = MAIN_AGENT_ID
    ) -> Completion:
        prompt_ids = self.tokenizer(prompt_text)["input_ids"]
        with self._lock:
            token_ids, logprobs = self._sample(prompt_ids)
        eos = self.tokenizer.eos_token_id
        return Completion(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            token_ids=tuple(token_ids),
            logprobs=tuple(logprobs),
            policy_version=self.version,
            request_id=f"local-{uuid.uuid4().hex[:16]}",
            prompt_token_ids=tuple(prompt_ids),
            finish_reason="stop" if token_ids and token_ids[-1] == eos else "length",
        )

    def _sample(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        import torch

        eos = self.tokenizer.eos_token_id
        tokens: list[int] = []
        logprobs: list[float] = []
        with torch.no_grad():
            inputs = torch.tensor([prompt_ids])  # (1, T)
            past = None
            for _ in range(self.max_new_tokens):
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                log_p = torch.log_softmax(out.logits[0, -1].float() / self.temperature, dim=-1)  # (V,)
                token = int(torch.multinomial(log_p.exp(), 1, generator=self._generator))
                tokens.append(token)
                logprobs.append(float(log_p[token]))
                if token == eos:
                    break
                inputs = torch.tensor([[token]])
        return tokens, logprobs
