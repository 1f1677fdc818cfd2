"""The forgetting set: its own texts (not the gate's), several thousand SmolLM2 tokens across domains, and an NLL
ratio with a bootstrap interval."""

from __future__ import annotations

import pytest

from demo.evaluate import forgetting
from demo.product.tasks.chat import GENERAL_TEXT


def test_the_forgetting_set_spans_five_domains_apart_from_the_gates_text():
    texts = forgetting.domains()
    assert set(texts) == {"prose", "science", "code", "dialogue", "instructions"}
    gate = GENERAL_TEXT.read_text()
    assert all(text.strip() and text not in gate and gate not in text for text in texts.values())


def test_same_weights_give_a_ratio_of_one_with_a_zero_width_interval(tiny_policy_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pieces = forgetting.chunks(AutoTokenizer.from_pretrained(str(tiny_policy_dir)), size=32)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_policy_dir)).eval()
    arm = forgetting.arm_figures(pieces, forgetting.chunk_nll(model, pieces))
    assert arm["chunks"] == len(pieces) > 10 and set(arm["by_domain"]) == set(forgetting.domains())
    figures = forgetting.ratio_figures(arm, arm)
    assert figures["ratio"] == pytest.approx(1.0) and figures["ci95"] == pytest.approx([1.0, 1.0])
    worse = {**arm, "chunk_nll": [x * 1.1 for x in arm["chunk_nll"]],
             "by_domain": {d: v * 1.1 for d, v in arm["by_domain"].items()}}
    figures = forgetting.ratio_figures(arm, worse)
    assert figures["ratio"] == pytest.approx(1.1) and forgetting.describe(figures).endswith("worse than the base")


@pytest.mark.slow  # converts SmolLM2 from its package (~30-45 s once per session)
def test_the_forgetting_set_holds_over_3000_smollm2_tokens(smollm2_converted):
    from transformers import AutoTokenizer

    pieces = forgetting.chunks(AutoTokenizer.from_pretrained(str(smollm2_converted[0])))
    tokens = sum(len(piece.ids) for piece in pieces)
    assert tokens >= 3000 and len(pieces) >= 25
    assert min(sum(len(p.ids) for p in pieces if p.domain == d) for d in forgetting.domains()) >= 500
