"""The light engine: sampled tokens with the logprobs of the distribution they were drawn from."""

import asyncio

import torch

from serving.engines.engine import Sampling
from serving.engines.hf_engine import HfEngine


async def _generate(engine, ids, sampling):
    tokens, logprobs, finish = [], [], None
    async for delta in engine.generate(ids, sampling, "r"):
        tokens += delta.token_ids
        logprobs += delta.logprobs
        finish = delta.finish_reason or finish
    return tokens, logprobs, finish


def _reference_logprobs(policy_dir, prompt, tokens, temperature=1.0):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0]  # (T, V)
    logprobs = torch.log_softmax(logits / temperature, -1)
    return [float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_logprobs_match_a_plain_forward_pass(tiny_policy_dir):
    async def main():
        engine = HfEngine(tiny_policy_dir)
        await engine.start()
        try:
            return await _generate(engine, [2, 60, 61], Sampling(temperature=0.7, max_tokens=6, seed=5))
        finally:
            await engine.shutdown()

    tokens, logprobs, finish = asyncio.run(main())
    assert len(tokens) == len(logprobs) >= 1
    assert finish in ("stop", "length")
    assert torch.allclose(torch.tensor(logprobs), torch.tensor(_reference_logprobs(tiny_policy_dir, [2, 60, 61],
                                                                                   tokens, 0.7)), atol=1e-4)


def test_seeded_sampling_repeats_and_length_finishes(tiny_policy_dir):
    async def main():
        engine = HfEngine(tiny_policy_dir)
        await engine.start()
        try:
            eos_free = Sampling(temperature=1.0, max_tokens=5, seed=11)
            first = await _generate(engine, [2, 60], eos_free)
            second = await _generate(engine, [2, 60], eos_free)
            greedy = await _generate(engine, [2, 60], Sampling(temperature=0.0, max_tokens=3))
            return first, second, greedy
        finally:
            await engine.shutdown()

    first, second, greedy = asyncio.run(main())
    assert first == second
    assert len(greedy[0]) <= 3 and all(lp <= 0 for lp in greedy[1])


def test_top_k_one_is_greedy(tiny_policy_dir):
    async def main():
        engine = HfEngine(tiny_policy_dir)
        await engine.start()
        try:
            top1 = await _generate(engine, [2, 61], Sampling(temperature=1.0, top_k=1, max_tokens=4, seed=3))
            greedy = await _generate(engine, [2, 61], Sampling(temperature=0.0, max_tokens=4))
            return top1, greedy
        finally:
            await engine.shutdown()

    top1, greedy = asyncio.run(main())
    assert top1[0] == greedy[0]
    assert all(abs(lp) < 1e-6 for lp in top1[1])  # the only token left has probability 1


def test_update_weights_in_place_samples_like_the_new_weights(tiny_policy_dir, tmp_path):
    from demo.policy.tiny_policy import build_policy

    second = build_policy(tmp_path / "second", ["edit", "search", "ask", "fix", "file", "done"], seed=1)
    sampling = Sampling(temperature=1.0, max_tokens=6, seed=5)

    async def main():
        engine = HfEngine(tiny_policy_dir)
        await engine.start()
        try:
            before = await _generate(engine, [2, 60, 61], sampling)
            report = await engine.update_weights(second, "2")
            after = await _generate(engine, [2, 60, 61], sampling)
            return before, after, report, await engine.weight_version()
        finally:
            await engine.shutdown()

    before, after, report, version = asyncio.run(main())
    assert version == "2" and report["seconds"] >= report["pause_s"] >= 0
    assert torch.allclose(torch.tensor(after[1]), torch.tensor(_reference_logprobs(second, [2, 60, 61], after[0])),
                          atol=1e-4)
    assert not torch.allclose(torch.tensor(before[1]),
                              torch.tensor(_reference_logprobs(second, [2, 60, 61], before[0])), atol=1e-4)


def test_update_weights_refuses_another_architecture_and_keeps_serving(tiny_policy_dir, tmp_path):
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "llama", ["edit", "search", "ask", "fix", "file", "done"], arch="llama")
    sampling = Sampling(temperature=1.0, max_tokens=4, seed=5)

    async def main():
        engine = HfEngine(tiny_policy_dir)
        await engine.start()
        try:
            before = await _generate(engine, [2, 60], sampling)
            try:
                await engine.update_weights(llama, "2")
                raise AssertionError("weights of another architecture must be refused")
            except ValueError as error:
                assert "two_engine" in str(error)
            return before, await _generate(engine, [2, 60], sampling), await engine.weight_version()
        finally:
            await engine.shutdown()

    before, after, version = asyncio.run(main())
    assert before == after and version == ""
