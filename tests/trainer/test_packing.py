"""Packed micro-batches: the layout, and scores equal to scoring every window alone (GPT-2 and Llama)."""

from __future__ import annotations

import random

import pytest
import torch

from liverl.config.trainer import DeepSpeedConfig
from trainer.step.batching import Sample, collate, collate_rows, pack, score_batch
from trainer.step.packing import micro_batches, pack_rows

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


def _sample(length: int, advantage: float = 1.0, offset: int = 0) -> Sample:
    return Sample(list(range(1, length + 1)), [1] * length, [-1.0] * length, advantage, 1.0, position_offset=offset)


def test_pack_rows_fills_rows_in_order_and_keeps_rows_times_width_within_the_budget():
    batches = pack_rows([_sample(5), _sample(3), _sample(4), _sample(2), _sample(6)], token_budget=16, row_tokens=8)
    assert [[[len(s.token_ids) for s in row] for row in rows] for rows in batches] == [[[5, 3], [4, 2]], [[6]]]
    for rows in batches:
        assert len(rows) * max(sum(len(s.token_ids) for s in row) for row in rows) <= 16


def test_a_window_longer_than_a_row_gets_a_row_of_its_own():
    batches = pack_rows([_sample(3), _sample(12), _sample(3)], token_budget=100, row_tokens=8)
    assert [[len(row) for row in rows] for rows in batches] == [[2, 1]]
    assert [len(b) for b in pack_rows([_sample(3), _sample(40)], token_budget=10, row_tokens=8)] == [1, 1]


def test_collate_rows_restarts_positions_and_marks_each_sample():
    batch = collate_rows([[_sample(3, advantage=1.0), _sample(2, advantage=2.0, offset=7)], [_sample(4)]])
    assert batch.token_ids.tolist() == [[1, 2, 3, 1, 2], [1, 2, 3, 4, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 7, 8], [0, 1, 2, 3, 0]]
    assert batch.sequence_ids.tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 0, -1]]
    assert batch.loss_mask.tolist() == [[0, 1, 1, 0, 1], [0, 1, 1, 1, 0]]  # every sample's first token: no loss
    assert batch.advantages.tolist() == [[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]]
    assert batch.real_tokens == 9 and batch.computed_tokens == 10 and batch.trained_tokens == 6


def test_the_padded_layout_is_the_fallback():
    samples = [_sample(5), _sample(3), _sample(4)]
    padded = micro_batches(samples, DeepSpeedConfig(micro_batch_tokens=10, pack_sequences=False))
    assert padded == [[[s] for s in group] for group in pack(samples, 10)]
    assert collate_rows(padded[0]).sequence_ids is None and collate(samples[:2]).position_ids is None


def _demo_like_samples(n: int, seed: int = 0) -> list[Sample]:
    """The demo's short sessions: prompts under 64 tokens and completions under 8 (demo/policy/bootstrap.py)."""
    rng = random.Random(seed)
    return [_sample(rng.randint(8, 72)) for _ in range(n)]


def _useful_share(layout: list[list[list[Sample]]]) -> float:
    real = sum(len(s.token_ids) for rows in layout for row in rows for s in row)
    return real / sum(collate_rows(rows).computed_tokens for rows in layout)


def test_packing_keeps_the_demos_micro_batches_at_least_90_percent_useful():
    samples = _demo_like_samples(400)
    packed = _useful_share(micro_batches(samples, DeepSpeedConfig(micro_batch_tokens=1024)))
    padded = _useful_share(micro_batches(samples, DeepSpeedConfig(micro_batch_tokens=1024, pack_sequences=False)))
    print(f"\nuseful share at micro_batch_tokens 1024: padded {padded:.3f}, packed {packed:.3f}")
    assert packed >= 0.9 and padded < packed


def _policy(tmp_path, arch: str, attention: str):
    from transformers import AutoModelForCausalLM

    from demo.policy.tiny_policy import build_policy

    folder = build_policy(tmp_path / arch, WORDS, arch=arch, n_layer=2, n_embd=64, n_head=2, seed=1)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attention).eval()


def _windows(vocab: int) -> list[Sample]:
    """Windows of several trajectories: different lengths, later windows at non-zero positions, and spans
    sampled at different temperature / top-p / top-k."""
    rng = random.Random(3)
    samples = []
    for index, (length, offset) in enumerate([(9, 0), (5, 0), (12, 30), (7, 0), (3, 4), (10, 17)]):
        split = length // 2
        temperature = [1.0] * split + [rng.choice([0.6, 0.9, 1.3])] * (length - split)
        top_p = [1.0] * split + [rng.choice([0.8, 0.95, 1.0])] * (length - split)
        top_k = [0] * split + [rng.choice([0, 5, 20])] * (length - split)
        samples.append(Sample([rng.randrange(4, vocab) for _ in range(length)], [0] * split + [1] * (length - split),
                              [-1.0] * length, float(index), 1.0, temperature, top_p, top_k, offset))
    return samples


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_packed_scores_equal_scoring_every_window_alone(tmp_path, arch, attention):
    model = _policy(tmp_path, arch, attention)
    samples = _windows(model.config.vocab_size)
    rows = [[samples[0], samples[1], samples[2]], [samples[3], samples[4], samples[5]]]
    with torch.no_grad():
        packed = score_batch(model, collate_rows(rows), all_tokens=True)
        alone = [score_batch(model, collate([sample]), all_tokens=True) for sample in samples]
    worst = 0.0
    for r, row in enumerate(rows):
        start = 0
        for sample in row:
            expected = alone[samples.index(sample)]
            span = slice(start, start + len(sample.token_ids))
            worst = max(worst, float((packed.logp[r, span] - expected.logp[0]).abs().max()))
            assert torch.equal(packed.unscorable[r, span], expected.unscorable[0])
            start = span.stop
    print(f"\n{arch} {attention}: max |packed - alone| logprob {worst:.2e}")
    assert worst <= 1e-5


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_window_does_not_see_the_window_packed_before_it(tmp_path, arch):
    from trainer.gate.scoring import score_tokens

    model = _policy(tmp_path, arch, "sdpa")
    samples = _windows(model.config.vocab_size)
    target = samples[2]
    with torch.no_grad():
        after_a = score_batch(model, collate_rows([[samples[0], target]]), all_tokens=True).logp[0, 9:]
        after_b = score_batch(model, collate_rows([[samples[5], target]]), all_tokens=True).logp[0, 10:]
        assert torch.allclose(after_a, after_b, atol=1e-5)
        # What position ids alone give under sdpa/eager: the window attends to its neighbour's tokens.
        leaky = collate_rows([[samples[0], target]])
        leaked = score_tokens(model, leaky.token_ids, leaky.attention_mask, leaky.sampling, leaky.position_ids).logp
    assert (leaked[0, 10:] - after_a[1:]).abs().max() > 1e-3


def test_packed_gradients_equal_the_sum_of_the_windows_gradients(tmp_path):
    model = _policy(tmp_path, "gpt2", "sdpa")
    samples = _windows(model.config.vocab_size)

    def gradient(batches):
        model.zero_grad()
        for batch in batches:
            (score_batch(model, batch).logp * batch.loss_mask).sum().backward()
        return model.transformer.wte.weight.grad.clone()

    packed = gradient([collate_rows([samples[:3], samples[3:]])])
    alone = gradient([collate([sample]) for sample in samples])
    assert torch.allclose(packed, alone, atol=1e-5) and alone.abs().sum() > 0
