"""Proof of the in-place weight update on vLLM: after it, the engine samples exactly what a freshly started
engine on the new weights samples (tokens, and logprobs within 1e-4 in fp32), and not what it sampled before.

Run for the demo's policy (GPT-2) and a Llama-architecture policy, both with tied word embeddings: the tie is
what broke vLLM's plain `reload_weights` on CPU (serving/engines/vllm_worker_extension.py says why). Two engine starts
per architecture: the one updated in place, and the fresh reference.
"""

import asyncio

import pytest

from serving.engines.engine import Sampling

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

WORDS = ["fix", "the", "file", "parser", "edit", "search", "done"]
PROMPTS = [[2, 64, 65, 66], [2, 67, 68], [2, 69, 64, 70, 65]]  # <bos> and word ids (64..70)
SEEDED = [Sampling(temperature=1.0, max_tokens=8, seed=11 + i) for i in range(len(PROMPTS))]


async def _sample(engine) -> list[tuple[list[int], list[float]]]:
    out = []
    for i, (prompt, sampling) in enumerate(zip(PROMPTS, SEEDED)):
        ids, logprobs = [], []
        async for delta in engine.generate(prompt, sampling, f"proof-{id(engine)}-{i}-{len(out)}"):
            ids += delta.token_ids
            logprobs += delta.logprobs
        out.append((ids, logprobs))
    return out


def _max_difference(a, b) -> float:
    assert [ids for ids, _ in a] == [ids for ids, _ in b], "different tokens sampled"
    return max(abs(x - y) for (_, la), (_, lb) in zip(a, b) for x, y in zip(la, lb))


def _run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_in_place_update_equals_a_fresh_engine_on_the_new_weights(arch, tmp_path):
    from demo.policy.tiny_policy import build_policy
    from liverl.config.serving import ServingConfig
    from serving.engines.vllm_engine import VllmEngine

    old = build_policy(tmp_path / "old", WORDS, arch=arch, n_positions=128, seed=0)
    new = build_policy(tmp_path / "new", WORDS, arch=arch, n_positions=128, seed=1)
    config = ServingConfig(engine="vllm", dtype="float32", max_model_len=128)

    async def updated_then_fresh():
        engine = VllmEngine(old, config)
        await engine.start()
        try:
            before = await _sample(engine)
            report = await engine.update_weights(new, version="2")
            after = await _sample(engine)
            assert await engine.weight_version() == "2"
        finally:
            await engine.shutdown()
        fresh_engine = VllmEngine(new, config)
        await fresh_engine.start()
        try:
            fresh = await _sample(fresh_engine)
        finally:
            await fresh_engine.shutdown()
        return before, after, fresh, report

    before, after, fresh, report = _run(updated_then_fresh())
    difference = _max_difference(after, fresh)
    print(f"{arch}: in-place update {report['seconds']:.3f}s, pause {report['pause_s']:.3f}s, "
          f"max |logprob - fresh| {difference:.2e}")
    assert difference <= 1e-4
    changed = [ids_b != ids_a or max(abs(x - y) for x, y in zip(lp_a, lp_b)) > 1e-3
               for (ids_b, lp_b), (ids_a, lp_a) in zip(before, after)]
    assert all(changed), "the update left some outputs as they were under the old weights"
