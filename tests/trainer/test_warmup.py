"""Learning-rate warm-up after every engine build (trainer.warmup_steps): a fresh AdamW's first step is lr·sign(g)
on every coordinate, so without it the first update after a start or a rewind is the largest of the run."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from liverl.config import load_config
from trainer.io.policy_io import load_policy
from trainer.step.engine import build_engine, deepspeed_config

LR = 1e-2


def _config(warmup_steps: int, stage: int = 1):
    return load_config(environ={}, overrides=[
        "--trainer.learning_rate", str(LR), "--trainer.warmup_steps", str(warmup_steps),
        "--trainer.deepspeed.zero_stage", str(stage), "--trainer.deepspeed.gradient_accumulation_steps", "1",
    ]).trainer


def _step(engine) -> float:
    """One optimizer step on a fixed batch; returns the learning rate it was taken with."""
    lr = engine.get_lr()[0]
    loss = engine(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.float().logsumexp(-1).mean()
    engine.backward(loss)
    engine.step()
    return lr


def _largest_move(tiny_policy_dir, config) -> float:
    """The largest change of any weight in the first step after a build."""
    engine = build_engine(load_policy(tiny_policy_dir), config)
    before = {name: p.detach().clone() for name, p in engine.module.named_parameters()}
    _step(engine)
    return max((p.detach() - before[name]).abs().max().item() for name, p in engine.module.named_parameters())


@pytest.mark.parametrize("stage", [0, 1])
def test_the_first_update_after_a_build_is_a_fraction_of_the_configured_rate(tiny_policy_dir, stage):
    cold = _largest_move(tiny_policy_dir, _config(0, stage))
    warmed = _largest_move(tiny_policy_dir, _config(4, stage))
    assert cold == pytest.approx(LR, rel=0.01)  # AdamW's first step: lr·g/|g| on every coordinate with a gradient
    assert warmed == pytest.approx(LR / 5, rel=0.01)  # step 1 of 4 warm-up steps: lr·1/(4 + 1)


def test_the_rate_climbs_to_the_configured_one_after_the_warmup_steps(tiny_policy_dir):
    engine = build_engine(load_policy(tiny_policy_dir), _config(4))
    rates = [_step(engine) for _ in range(7)]
    assert rates == pytest.approx([LR * k / 5 for k in range(1, 5)] + [LR] * 3)


def test_a_resumed_checkpoint_goes_on_with_its_schedule_not_a_new_warmup(tiny_policy_dir, tmp_path):
    engine = build_engine(load_policy(tiny_policy_dir), _config(4))
    _step(engine), _step(engine)
    engine.save_checkpoint(str(tmp_path), tag="step-2")
    resumed = build_engine(load_policy(tiny_policy_dir), _config(4))
    resumed.load_checkpoint(str(tmp_path), tag="step-2")
    assert [_step(resumed) for _ in range(3)] == pytest.approx([LR * 3 / 5, LR * 4 / 5, LR])


def test_zero_warmup_steps_is_no_scheduler(tiny_policy_dir):
    assert "scheduler" not in deepspeed_config(_config(0))
    engine = build_engine(load_policy(tiny_policy_dir), _config(0))
    assert engine.lr_scheduler is None and _step(engine) == LR


def test_one_warmup_step_is_refused_with_what_to_use():
    with pytest.raises(ValidationError, match="warmup_steps"):
        _config(1)
