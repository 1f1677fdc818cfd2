"""The held-out evaluator plays a LoRA version merged into a copy of its base: the same function as the base under
the adapter (what serving runs), in a folder vLLM loads like any policy."""

from __future__ import annotations

import pytest
import torch

from demo.evaluate.heldout_success import merged_folder
from tests.serving.lora_adapters import build_adapter, build_base


def test_the_merged_folder_computes_what_the_base_under_its_adapter_computes(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = build_base(tmp_path / "base")
    adapter = build_adapter(base, tmp_path / "adapter", "1", seed=3)
    merged = merged_folder(base, adapter, tmp_path / "merged")
    ids = torch.tensor([AutoTokenizer.from_pretrained(str(merged))("fix the file parser")["input_ids"]])
    with torch.no_grad():
        expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter))(ids).logits
        plain = AutoModelForCausalLM.from_pretrained(str(base))(ids).logits
        got = AutoModelForCausalLM.from_pretrained(str(merged))(ids).logits
    assert (expected - plain).abs().max() > 1e-2  # the adapter changes the outputs
    assert torch.allclose(got, expected, atol=1e-5)
    assert not list(merged.glob("liverl_*")), "the base's liverl manifests do not describe the merged weights"


def test_a_folder_that_is_not_an_adapter_is_refused(tmp_path):
    base = build_base(tmp_path / "base")
    with pytest.raises(ValueError, match="not a peft adapter folder"):
        merged_folder(base, base, tmp_path / "merged")
