"""The export's weight probe (trainer/io/weight_probe.py): measured on the model object the export came from (a DeepSpeed
engine's module, ZeRO-3 included; base + adapter for a LoRA version), it describes the exported weights as serving
will load them, and the same probe set is used for every version of a policy."""

from __future__ import annotations

import pytest
import torch

from liverl.config import load_config
from liverl.config.serving import ServingConfig
from liverl.contracts.weight_probe import read_probe
from trainer.io.policy_io import export_policy, load_policy
from trainer.io.weight_probe import measure_weight_probe, probe_sequences
from trainer.step.engine import build_engine, full_state_dict


def _largest_difference(a, b) -> float:
    assert a.sequences == b.sequences
    return max(abs(x - y) for ra, rb in zip(a.logprobs, b.logprobs) for x, y in zip(ra, rb))


def test_the_probe_is_the_models_raw_next_token_logprobs(tiny_policy_dir):
    model = load_policy(tiny_policy_dir)
    model.train()  # the trainer's module is in training mode between steps
    probe = measure_weight_probe(model)
    assert model.training, "the probe must leave the module's mode as it found it"
    ids = torch.tensor(probe.sequences)
    with torch.no_grad():
        reference = torch.log_softmax(load_policy(tiny_policy_dir)(input_ids=ids).logits[:, :-1], -1)
    for i, row in enumerate(probe.logprobs):
        assert row == pytest.approx([float(reference[i, j, t]) for j, t in enumerate(probe.sequences[i][1:])], abs=1e-6)
    assert probe.sequences == tuple(map(tuple, probe_sequences(model.config.vocab_size, 512)))  # fixed per vocabulary
    assert probe_sequences(50_000, 512) == probe_sequences(50_000, 512) and max(map(max, probe_sequences(
        200_000, 512))) < 32000  # ids a padded vocabulary's tokenizer lacks are never drawn


@pytest.mark.parametrize("stage, precision", [(0, "fp32"), (3, "bf16")])
def test_the_probe_of_the_engine_module_describes_the_export(tiny_policy_dir, tmp_path, stage, precision):
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(stage), "--trainer.deepspeed.precision", precision,
        "--trainer.deepspeed.gradient_accumulation_steps", "1",
    ]).trainer
    engine = build_engine(load_policy(tiny_policy_dir), config)
    ids = torch.tensor([[5, 6, 7, 8]])
    engine.backward(engine(input_ids=ids).logits.float().logsumexp(-1).mean())
    engine.step()
    weights = full_state_dict(engine)
    probe = measure_weight_probe(engine.module)  # as trainer/loop.py does, on every rank
    folder = export_policy(engine.module, weights, tmp_path / "export", tiny_policy_dir)
    probe.write(folder)
    exported = measure_weight_probe(load_policy(folder))  # what a replica loading the folder in fp32 computes
    assert read_probe(folder) == probe
    assert probe.dtype == {"fp32": "float32", "bf16": "bfloat16"}[precision]
    allowed = ServingConfig().weight_probe_tolerance_float32 if precision == "fp32" else \
        ServingConfig().weight_probe_tolerance_half
    assert _largest_difference(probe, exported) <= allowed
    before = measure_weight_probe(load_policy(tiny_policy_dir))
    assert _largest_difference(before, exported) > 1e-4, "one step must move the probe"


def test_an_adapter_probe_is_of_base_plus_adapter(tiny_policy_dir):
    from peft import LoraConfig, get_peft_model

    base = load_policy(tiny_policy_dir)
    plain = measure_weight_probe(base)
    adapter = LoraConfig(r=4, target_modules=["c_attn"], init_lora_weights=False)  # non-zero B: it moves the output
    model = get_peft_model(load_policy(tiny_policy_dir), adapter)
    with_adapter = measure_weight_probe(model)
    merged = measure_weight_probe(model.merge_and_unload())
    assert _largest_difference(with_adapter, merged) <= 1e-5
    assert _largest_difference(with_adapter, plain) > 1e-3
