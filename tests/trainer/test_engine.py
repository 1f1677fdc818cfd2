"""The DeepSpeed engine from config on CPU: ZeRO stages and precision, one step, consolidated export weights."""

from __future__ import annotations

import pytest
import torch

from liverl.config import load_config
from trainer.io.policy_io import load_policy
from trainer.step.engine import build_engine, deepspeed_config, full_state_dict


def test_deepspeed_config_follows_the_trainer_section():
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", "2", "--trainer.deepspeed.precision", "bf16",
        "--trainer.deepspeed.gradient_accumulation_steps", "4",
    ]).trainer
    ds = deepspeed_config(config)
    assert ds["zero_optimization"] == {"stage": 2} and ds["bf16"] == {"enabled": True}
    assert ds["gradient_accumulation_steps"] == 4 and not ds["fp16"]["enabled"]


@pytest.mark.parametrize("stage, precision", [(0, "fp32"), (3, "bf16")])
def test_engine_steps_and_exports_full_weights(tiny_policy_dir, stage, precision):
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(stage), "--trainer.deepspeed.precision", precision,
        "--trainer.deepspeed.gradient_accumulation_steps", "1",
    ]).trainer
    reference = load_policy(tiny_policy_dir).state_dict()
    engine = build_engine(load_policy(tiny_policy_dir), config)
    ids = torch.tensor([[5, 6, 7, 8]])
    loss = engine(input_ids=ids).logits.float().logsumexp(-1).mean()
    engine.backward(loss)
    engine.step()
    weights = full_state_dict(engine)
    assert weights.keys() == reference.keys()
    for name, tensor in weights.items():  # ZeRO-3 partitions parameters: the export must gather them whole
        assert tensor.shape == reference[name].shape and tensor.dtype == torch.float32
    moved = [name for name, tensor in weights.items() if not torch.allclose(tensor, reference[name])]
    assert moved, "one optimizer step should change the weights"
