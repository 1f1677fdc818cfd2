"""LoraSlots on the light engine with real peft adapters: at most `capacity` tenant adapters loaded, a cold one
loaded at its request after the least recently used idle one is removed, a busy one never removed (a cold request
waits for a place instead), a failed load fails that request alone, and a weight update's dropped adapters are
loaded again on demand."""

import asyncio

import pytest

from serving.engines.engine import Adapter, Sampling
from serving.engines.hf_engine import HfEngine
from serving.engines.lora_slots import LoraSlots
from tests.serving.lora_adapters import build_adapter, build_base, reference_logprobs

PROMPT = [2, 64, 65, 66]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slots")
    base = build_base(tmp / "base", seed=0)
    return base, [build_adapter(base, tmp / f"t{i}", base_version="1", seed=30 + i) for i in range(4)]


def _adapters(folders) -> list[Adapter]:
    _, paths = folders
    return [Adapter(f"tenant-{i}", 100 + i, path, str(10 + i), "1") for i, path in enumerate(paths)]


async def _generate(engine, slots, adapter, seed=1):
    tokens, logprobs = [], []
    async with slots.use(adapter):
        async for delta in engine.generate(PROMPT, Sampling(temperature=1.0, max_tokens=3, seed=seed), "r",
                                           adapter=adapter):
            tokens += delta.token_ids
            logprobs += delta.logprobs
    return tokens, logprobs


def test_least_recently_used_idle_adapter_is_removed_for_a_cold_one(folders):
    base, _ = folders
    a, b, c, d = _adapters(folders)

    async def scenario():
        engine = HfEngine(base)
        await engine.start()
        slots = LoraSlots(engine, capacity=2)
        try:
            await _generate(engine, slots, a)
            await _generate(engine, slots, b)
            await _generate(engine, slots, a)  # a is now the most recently used: b goes first
            tokens, logprobs = await _generate(engine, slots, c)
            after_c = [x.name for x in slots.loaded()]
            await _generate(engine, slots, b)  # cold again: loaded on demand, a (least recent) removed
            return after_c, [x.name for x in slots.loaded()], slots.loads, slots.evictions, tokens, logprobs, \
                [engine.has_adapter(x) for x in (a, b, c, d)]
        finally:
            await engine.shutdown()

    after_c, after_b, loads, evictions, tokens, logprobs, loaded = asyncio.run(scenario())
    assert after_c == ["tenant-0", "tenant-2"]
    assert after_b == ["tenant-2", "tenant-1"]
    assert (loads, evictions) == (4, 2)
    assert loaded == [False, True, True, False]
    assert logprobs == pytest.approx(reference_logprobs(base, c.path, PROMPT, tokens), abs=1e-4)


def test_a_busy_adapter_is_never_removed_and_a_cold_request_waits_for_a_place(folders):
    base, _ = folders
    a, b, c, _d = _adapters(folders)

    async def scenario():
        engine = HfEngine(base)
        await engine.start()
        slots = LoraSlots(engine, capacity=2)
        try:
            await slots.acquire(a)
            await slots.acquire(b)  # both places busy
            cold = asyncio.create_task(slots.acquire(c))
            for _ in range(20):
                await asyncio.sleep(0.01)
            waited = not cold.done() and engine.has_adapter(a) and engine.has_adapter(b)
            slots.release(b)  # b's request ends: c takes its place, a (busy) stays
            await asyncio.wait_for(cold, 30)
            state = [engine.has_adapter(x) for x in (a, b, c)]
            slots.release(a)
            slots.release(c)
            return waited, state
        finally:
            await engine.shutdown()

    waited, state = asyncio.run(scenario())
    assert waited
    assert state == [True, False, True]


def test_a_failed_load_fails_its_request_alone_and_a_reload_is_loaded_again(folders, tmp_path):
    import shutil

    base, _ = folders
    a, b, _c, _d = _adapters(folders)
    broken_dir = tmp_path / "broken"
    shutil.copytree(a.path, broken_dir)
    (broken_dir / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    broken = Adapter("tenant-broken", 199, broken_dir, "19", "1")

    async def scenario():
        engine = HfEngine(base)
        await engine.start()
        slots = LoraSlots(engine, capacity=2)
        try:
            await _generate(engine, slots, a)
            with pytest.raises(ValueError, match="does not fit the serving model"):
                await _generate(engine, slots, broken)
            busy_after = slots.busy(broken)
            await engine.update_weights(base, "1")  # a weight update: the light engine keeps its adapters
            await engine.unload_adapter(a)  # as vLLM's reload drops them: the next request loads a again
            tokens, logprobs = await _generate(engine, slots, a)
            return busy_after, [x.name for x in slots.loaded()], tokens, logprobs
        finally:
            await engine.shutdown()

    busy_after, loaded, tokens, logprobs = asyncio.run(scenario())
    assert busy_after == 0
    assert loaded == ["tenant-0"]
    assert logprobs == pytest.approx(reference_logprobs(base, a.path, PROMPT, tokens), abs=1e-4)


def test_a_tenant_request_never_starts_on_weights_other_than_its_adapters_base(folders, tmp_path):
    """A tenant request leased just before a shared weight update must not run its adapter on the new weights
    (it would be recorded as the tenant's version): it is refused during the update and after it."""
    import shutil

    from serving.engines.lora_slots import TenantEngine

    base, _ = folders
    a, *_ = _adapters(folders)
    other = shutil.copytree(base, tmp_path / "next-base")

    async def scenario():
        engine = HfEngine(base)
        await engine.start()
        tenant = TenantEngine(engine, a, LoraSlots(engine, capacity=2))
        sampling = Sampling(temperature=1.0, max_tokens=2, seed=1)
        try:
            before = [d async for d in tenant.generate(PROMPT, sampling, "before")]
            engine.updating = True  # what update_weights sets while the weights change
            with pytest.raises(RuntimeError, match="whose weights this engine is replacing"):
                [d async for d in tenant.generate(PROMPT, sampling, "during")]
            engine.updating = False
            await engine.update_weights(other, "9")
            with pytest.raises(RuntimeError, match="whose weights this engine is replacing"):
                [d async for d in tenant.generate(PROMPT, sampling, "after")]
            return before, engine.updating, tenant.slots.busy(a)
        finally:
            await engine.shutdown()

    before, updating, busy = asyncio.run(scenario())
    assert before and before[-1].finish_reason
    assert (updating, busy) == (False, 0)  # the flag is down again and no lease was left behind
