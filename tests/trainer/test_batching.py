"""Token-budget micro-batches and masks."""

from __future__ import annotations

import torch

from trainer.batching import Sample, collate, pack


def _sample(length: int, weight: float = 1.0) -> Sample:
    return Sample(list(range(1, length + 1)), [1] * length, [-1.0] * length, 1.0, weight)


def test_pack_keeps_order_and_respects_the_padded_budget():
    batches = pack([_sample(4), _sample(4), _sample(8), _sample(2)], token_budget=16)
    assert [[len(s.token_ids) for s in batch] for batch in batches] == [[4, 4], [8, 2]]


def test_a_trajectory_longer_than_the_budget_gets_its_own_micro_batch():
    assert [len(b) for b in pack([_sample(3), _sample(40), _sample(3)], token_budget=10)] == [1, 1, 1]


def test_collate_pads_masks_token_zero_and_applies_the_staleness_weight():
    batch = collate([_sample(3, weight=0.5), _sample(2)])
    assert batch.token_ids.tolist() == [[1, 2, 3], [1, 2, 0]]
    assert batch.loss_mask.tolist() == [[0.0, 0.5, 0.5], [0.0, 1.0, 0.0]]
    assert batch.real_tokens == 5 and batch.masked_tokens == 2.0
    assert torch.equal(batch.attention_mask, torch.tensor([[1, 1, 1], [1, 1, 0]]))
