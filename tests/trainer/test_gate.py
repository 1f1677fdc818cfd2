"""The promotion gate passes a sound candidate and refuses a deliberately degraded one."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from liverl.contracts import names
from liverl.config.trainer import GateConfig, LossConfig
from tests.trainer.conftest import commit_batch, trainer_config
from trainer.base_policy import register_base
from trainer.gate import evaluate
from trainer.loop import Trainer
from trainer.policy_io import load_policy
from trainer.registry import Registry
from trainer.trajectory import from_row


def _degrade(model, scale: float = 1.0):
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * scale)
    return model


def _judge(candidate, champion, holdout, drift=None):
    return evaluate(candidate, champion, holdout, [1.0 if i % 2 else -1.0 for i in range(len(holdout))],
                    LossConfig(), GateConfig(), max_seq_len=64, drift=drift)


def test_gate_figures_on_held_out_trajectories(tiny_policy_dir, trajectories):
    champion = load_policy(tiny_policy_dir)
    holdout = [from_row(row, 0) for row in trajectories.batch("h", 4)]
    same = _judge(copy.deepcopy(champion), champion, holdout)
    assert same.passed and same.figures["kl"] < 1e-9 and abs(same.figures["loss_increase"]) < 1e-9
    assert same.figures["drift"].startswith("missing")  # said, not silently ignored

    degraded = _judge(_degrade(copy.deepcopy(champion)), champion, holdout)
    assert not degraded.passed and any("KL" in reason for reason in degraded.reasons)
    assert degraded.figures["nll_increase"] > 0.5

    nan = copy.deepcopy(champion)
    next(nan.parameters()).data.fill_(float("nan"))
    assert "non-finite" in _judge(nan, champion, holdout).reasons[0]
    assert not _judge(champion, champion, []).passed  # nothing to judge on

    drifted = _judge(champion, champion, holdout, drift={"ok": False, "flags": [
        {"figure": "rate.clarifying", "reason": "|delta| 0.2 > 0.05"}]})
    assert not drifted.passed and "rate.clarifying" in drifted.reasons[0]


def test_gate_scores_each_segment_as_its_own_sequence(tiny_policy_dir, trajectories):
    champion = load_policy(tiny_policy_dir)
    rows = [trajectories.segmented_row(f"s-{i}", ["fix the file : edit file done", "summary : fix file edit done",
                                                   "ask : search file"][i:], 1.0) for i in range(2)]
    rows.append(trajectories.row("old", "fix the file : ask ask ask", 0.0))  # no segment_starts: one segment
    holdout = [from_row(row, 0) for row in rows]
    report = _judge(copy.deepcopy(champion), champion, holdout)
    assert report.passed and report.figures["kl"] < 1e-9
    # Behaviour logprobs come from scoring each segment alone: the served-token NLL is exactly theirs.
    served = [-lp for t in holdout for s, e in t.segments() for lp, m in
              zip(t.behaviour_logprobs[s + 1:e], t.loss_mask[s + 1:e]) if m]
    assert report.figures["holdout_tokens"] == len(served) == sum(t.trainable_tokens for t in holdout)
    assert report.figures["candidate_nll"] == pytest.approx(sum(served) / len(served), abs=1e-5)


@pytest.mark.slow
def test_gate_refuses_a_degraded_candidate_and_records_why(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=4)
    register_base(config, tiny_policy_dir, say=lambda *_: None)
    commit_batch(config.table.trajectories_uri, trajectories.batch("g", 12), "batch-g", 0)
    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    assert trainer.run(follow=False) == 1
    registry = Registry(config.mlflow)
    good = registry.alias_version(names.ALIAS_CANDIDATE)
    assert registry.alias_version(names.ALIAS_CHAMPION) == good, lines  # a sound candidate is promoted

    _degrade(trainer.engine.module)  # a broken training run: weights far from anything sensible
    trainer.state.step += 1  # as if one more (broken) step had run
    trainer.window.steps = 1
    trainer.checkpoint_and_publish()
    bad = registry.alias_version(names.ALIAS_CANDIDATE)
    assert bad != good
    assert registry.alias_version(names.ALIAS_CHAMPION) == good  # champion did not move
    tags = registry.tags(bad)
    assert tags[names.TAG_GATE_DECISION] == "fail"
    report = json.loads(tags[names.TAG_GATE_REPORT])
    assert report["champion"] == good and report["figures"]["kl"] > GateConfig().max_kl and report["reasons"]
    assert any(line.startswith(f"gate v{bad} vs v{good}: fail") for line in lines)
