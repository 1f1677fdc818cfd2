"""Every ZeRO stage accumulates every micro-batch of a step: DeepSpeed's update equals plain torch AdamW's.

ZeRO-3 adds a micro-batch's gradient to the stored one only when the engine's forward ran for it; scoring that
bypassed the engine kept the last micro-batch of each step only (5.97e-3 max weight difference to torch after
3 steps at lr 1e-3, against 9.7e-7 to torch trained on the last micro-batch only).
"""

from __future__ import annotations

import pytest
import torch

from liverl.config import load_config
from trainer.gate.scoring import TokenSampling, score_tokens
from trainer.io.policy_io import load_policy
from trainer.step.engine import build_engine, full_state_dict

STEPS, ACCUMULATION, LEARNING_RATE = 3, 2, 1e-3
# fp32 on one rank: at most the same sums in another order. Observed 0.0 for every stage against moves of 3e-3.
TOLERANCE = 1e-6
# Each micro-batch its own tokens, so one left out changes the update (a step of the last one only: ~6e-3 off).
MICRO_BATCHES = [
    [[9, 64, 65, 66, 67, 68, 64], [9, 65, 65, 67, 69, 66, 68]],
    [[9, 68, 67, 66, 65, 64, 69], [9, 69, 64, 68, 65, 67, 66]],
]


def _objective(model, ids: torch.Tensor) -> torch.Tensor:
    """Token-mean processed log-likelihood at temperature 0.7, top-p 0.9 (the scoring path training runs)."""
    sampling = TokenSampling(torch.full(ids.shape, 0.7), torch.full(ids.shape, 0.9),
                             torch.zeros(ids.shape, dtype=torch.long))
    scored = score_tokens(model, ids, torch.ones_like(ids), sampling, chunk_tokens=4)
    keep = (~scored.unscorable)[:, 1:].float()
    return -(scored.logp[:, 1:] * keep).sum() / keep.sum().clamp(min=1)


def _torch_reference(policy_dir) -> dict[str, torch.Tensor]:
    model = load_policy(policy_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    for _ in range(STEPS):
        optimizer.zero_grad()
        for ids in MICRO_BATCHES:
            (_objective(model, torch.tensor(ids)) / ACCUMULATION).backward()
        optimizer.step()
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.fixture(scope="module")
def torch_weights(tiny_policy_dir):
    return _torch_reference(tiny_policy_dir)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_zero_stage_accumulates_like_torch(tiny_policy_dir, torch_weights, stage):
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(stage), "--trainer.deepspeed.precision", "fp32",
        "--trainer.deepspeed.gradient_accumulation_steps", str(ACCUMULATION),
        "--trainer.deepspeed.gradient_clipping", "0", "--trainer.learning_rate", str(LEARNING_RATE),
        "--trainer.warmup_steps", "0",  # the reference is a plain AdamW at one rate (the warm-up: test_warmup.py)
    ]).trainer
    initial = load_policy(tiny_policy_dir).state_dict()
    engine = build_engine(load_policy(tiny_policy_dir), config)
    for _ in range(STEPS):
        for ids in MICRO_BATCHES:
            engine.backward(_objective(engine, torch.tensor(ids)))  # DeepSpeed divides by the accumulation
            engine.step()
    trained = full_state_dict(engine)
    moved = max(float((torch_weights[name] - initial[name]).abs().max()) for name in initial)
    gap = max(float((trained[name] - torch_weights[name]).abs().max()) for name in initial)
    print(f"\nZeRO-{stage}: max |DeepSpeed - torch AdamW| {gap:.2e}, torch moved {moved:.2e}")
    assert moved > 1e-3, "the steps should move the weights well past the tolerance"
    assert gap < TOLERANCE, f"ZeRO-{stage} differs from torch AdamW by {gap:.3g} (torch moved {moved:.3g})"
