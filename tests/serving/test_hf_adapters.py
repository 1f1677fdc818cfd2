"""The light engine's LoRA adapters (peft on the live model): the logprobs of base + adapter, the base with adapters
loaded, a weight update under loaded adapters, the last adapter unloaded, and an adapter that does not fit."""

import asyncio

import pytest

from serving.engines.engine import Adapter, Sampling
from serving.engines.hf_engine import HfEngine
from tests.serving.lora_adapters import build_adapter, build_base, reference_logprobs

PROMPT = [2, 64, 65, 66]
SAMPLING = Sampling(temperature=1.0, max_tokens=6, seed=3)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf-lora")
    base_a, base_b = build_base(tmp / "a", seed=0), build_base(tmp / "b", seed=1)
    return {"a": base_a, "b": base_b, "a1": build_adapter(base_a, tmp / "a1", "1", seed=21),
            "a2": build_adapter(base_a, tmp / "a2", "1", seed=22)}


def _adapter(folder, version: str, lora_id: int) -> Adapter:
    return Adapter(name=f"liverl-v{version}-{lora_id}", lora_id=lora_id, path=folder, version=version, base_version="1")


async def _sample(engine, adapter=None, sampling=SAMPLING):
    tokens, logprobs = [], []
    async for delta in engine.generate(PROMPT, sampling, "r", adapter=adapter):
        tokens += delta.token_ids
        logprobs += delta.logprobs
    return tokens, logprobs


def _difference(base_dir, adapter_dir, sampled) -> float:
    tokens, logprobs = sampled
    expected = reference_logprobs(base_dir, adapter_dir, PROMPT, tokens)
    return max(abs(a - b) for a, b in zip(logprobs, expected))


def test_requests_run_under_their_adapter_or_on_the_base(folders):
    async def scenario():
        engine = HfEngine(folders["a"])
        await engine.start()
        first, second = _adapter(folders["a1"], "2", 1), _adapter(folders["a2"], "3", 2)
        try:
            await engine.load_adapter(first)
            await engine.load_adapter(second)
            return (await _sample(engine, first), await _sample(engine, second), await _sample(engine),
                    engine.has_adapter(first))
        finally:
            await engine.shutdown()

    on_first, on_second, on_base, loaded = asyncio.run(scenario())
    assert loaded
    assert _difference(folders["a"], folders["a1"], on_first) <= 1e-4
    assert _difference(folders["a"], folders["a2"], on_second) <= 1e-4
    assert _difference(folders["a"], None, on_base) <= 1e-4
    assert _difference(folders["a"], None, on_first) > 1e-3  # the adapter changes the outputs


def test_weights_update_under_loaded_adapters_and_the_last_adapter_unloads(folders):
    async def scenario():
        engine = HfEngine(folders["a"])
        await engine.start()
        first = _adapter(folders["a1"], "2", 1)
        try:
            await engine.load_adapter(first)
            await engine.update_weights(folders["b"], "9")  # the checkpoint's names, not peft's .base_layer. ones
            on_b = await _sample(engine)
            await engine.update_weights(folders["a"], "1")
            await engine.unload_adapter(first)  # the last one: peft's layers come out again
            after_unload = await _sample(engine)
            return on_b, after_unload, engine.has_adapter(first)
        finally:
            await engine.shutdown()

    on_b, after_unload, still_loaded = asyncio.run(scenario())
    assert _difference(folders["b"], None, on_b) <= 1e-4
    assert _difference(folders["a"], None, after_unload) <= 1e-4
    assert not still_loaded


def test_an_adapter_that_does_not_fit_is_refused_and_the_engine_keeps_serving(folders, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(folders["a1"], broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")

    async def scenario():
        engine = HfEngine(folders["a"])
        await engine.start()
        try:
            with pytest.raises(ValueError, match="does not fit the serving model"):
                await engine.load_adapter(_adapter(broken, "4", 1))
            return await _sample(engine)
        finally:
            await engine.shutdown()

    assert _difference(folders["a"], None, asyncio.run(scenario())) <= 1e-4
