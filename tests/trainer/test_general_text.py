"""The gate watches general ability: a candidate whose general-text NLL rises past the limit over its adapter's
base is refused; an adapter that leaves the text's NLL alone passes."""

from __future__ import annotations

import pytest
import torch

from liverl.config import load_config
from trainer.gate.general_text import judge_general_text
from trainer.io.policy_io import export_adapter, weights_digest
from trainer.step.adapters import AdapterBase, trainable_policy

WORDS = ["edit", "search", "ask", "fix", "file", "done"]
TEXT = " ".join(WORDS * 8)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from demo.policy.tiny_policy import build_policy

    folder = build_policy(tmp_path_factory.mktemp("general") / "base", WORDS, arch="llama")
    # Fitted to the general text first, so that the base knows it and an adapter can only make it worse.
    from transformers import AutoTokenizer

    ids = torch.tensor([AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"]])
    model = AutoModelForCausalLM.from_pretrained(folder)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        optimizer.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
    model.save_pretrained(folder)
    return folder


def _adapter(llama_dir, out_dir, scale: float):
    """An adapter whose B matrices are `scale` x normal noise (0: peft's init, the base's own outputs)."""
    lora = load_config(environ={}, overrides=["--trainer.lora.enabled", "true"]).trainer.lora
    torch.manual_seed(0)
    policy = trainable_policy(llama_dir, AdapterBase("1", weights_digest(llama_dir), llama_dir), lora)
    with torch.no_grad():
        for name, parameter in policy.adapter.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn_like(parameter) * scale)
    weights = {name: p.detach().clone() for name, p in policy.adapter.named_parameters() if p.requires_grad}
    return export_adapter(policy.adapter, weights, out_dir, policy.manifest(), llama_dir)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "general.txt"
    path.write_text(TEXT)
    return path


def test_an_adapter_that_keeps_the_text_passes(llama_dir, text_file, tmp_path):
    folder = _adapter(llama_dir, tmp_path / "zero", scale=0.0)
    reasons, figures = judge_general_text(folder, llama_dir, text_file, 0.05)
    assert reasons == []
    assert figures["general_nll"] == pytest.approx(figures["general_nll_base"], rel=1e-5)


def test_an_adapter_that_forgets_the_text_is_refused_with_the_figures(llama_dir, text_file, tmp_path):
    folder = _adapter(llama_dir, tmp_path / "noisy", scale=2.0)
    reasons, figures = judge_general_text(folder, llama_dir, text_file, 0.05)
    assert figures["general_nll_increase"] > 0.05
    assert len(reasons) == 1 and "over the base" in reasons[0] and "limit +5%" in reasons[0]


def test_an_empty_text_is_a_clear_error(llama_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    folder = _adapter(llama_dir, tmp_path / "zero", scale=0.0)
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        judge_general_text(folder, llama_dir, empty, 0.05)
