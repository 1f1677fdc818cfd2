"""Token-budget micro-batches and masks."""

from __future__ import annotations

import pytest
import torch

from trainer.step.batching import Sample, collate, pack


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


def test_staleness_weights_scale_the_gradient_instead_of_cancelling():
    from liverl.config.trainer import LossConfig
    from trainer.step.losses import token_losses
    from trainer.step.training_step import step_objective

    # One on-policy token per trajectory (r = 1, ppo loss -A), A = 1 and A = 3, weights 1 and 0.5.
    batch = collate([Sample([1, 2], [0, 1], [0.0, -1.0], 1.0, 1.0), Sample([1, 2], [0, 1], [0.0, -1.0], 3.0, 0.5)])
    logp = torch.tensor([[0.0, -1.0], [0.0, -1.0]], requires_grad=True)
    losses = token_losses(logp, batch.behaviour_logprobs, batch.advantages, LossConfig(), batch.loss_mask)
    assert batch.trained_tokens == 2 and batch.masked_tokens == 1.5
    objective = step_objective(losses, batch.loss_mask, batch.trained_tokens)
    objective.backward()
    # (1·(-1) + 0.5·(-3)) / 2 tokens = -1.25; d/dlogp = -w·A·r / 2: -0.5 and -0.75.
    assert objective.item() == pytest.approx(-1.25)
    assert logp.grad[:, 1].tolist() == pytest.approx([-0.5, -0.75])
    # Alone, a down-weighted trajectory's gradient is scaled by its weight (a weighted mean would cancel it).
    alone = collate([Sample([1, 2], [0, 1], [0.0, -1.0], 3.0, 0.5)])
    logp = torch.tensor([[0.0, -1.0]], requires_grad=True)
    step_objective(token_losses(logp, alone.behaviour_logprobs, alone.advantages, LossConfig(), alone.loss_mask),
                   alone.loss_mask, alone.trained_tokens).backward()
    assert logp.grad[0, 1].item() == pytest.approx(-1.5)  # 0.5 · -3, not -3


def test_zero_weight_padding_copies_count_no_tokens():
    assert collate([_sample(4, weight=0.0)]).trained_tokens == 0
