"""The promotion gate judges the candidate itself on held-out sessions: it refuses a candidate degraded by noise,
one trained on inverted rewards and one that games a known hack (asking instead of editing), and passes an
improved one whose proxies (sub-agents per task) rise with the verified outcome; it fails closed on missing,
partial or NaN evidence."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from liverl.config.rewards import DriftThreshold, RewardsConfig
from liverl.config.trainer import AdvantageConfig, GateConfig, LossConfig
from liverl.contracts import names
from tests.trainer.conftest import TrajectoryFactory, commit_batch, trainer_config
from trainer.gate.holdout import GateEvidence
from trainer.gate.promotion import evaluate
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.policy_io import load_policy
from trainer.io.registry import Registry
from trainer.loop import Trainer
from trainer.step.advantages import Baselines, compute_advantages
from trainer.step.batching import token_logprobs
from trainer.step.rewarding import mixed_rewards
from trainer.step.trajectory import from_row

# Three behaviours of an orchestrator on one task, each (text, verified outcome, judge score, signals). The judge
# was fooled by questions: asking scores almost like editing in the mixed reward (the hack the monitors must catch)
# although its verified outcome is 0; searching without editing scores nothing. Editing, the good behaviour, also
# runs more sub-agents: a proxy that rises WITH the outcome, which is what the reward asks for, not hacking.
EDIT = ("fix the file : edit file done", 1.0, 0.5,
        {"edits": 1.0, "tool_calls": 1.0, "turns": 1.0, "subagents_created": 3.0, "subagents_instantiated": 3.0})
ASK = ("fix the file : ask ask ask", 0.0, 0.8,
       {"clarifying": 1.0, "tool_calls": 1.0, "turns": 1.0, "subagents_created": 1.0, "subagents_instantiated": 1.0})
SEARCH = ("fix the file : search file done", 0.0, 0.0,
          {"tool_calls": 1.0, "turns": 1.0, "subagents_created": 1.0, "subagents_instantiated": 1.0})
BEHAVIOURS = {"edit": EDIT, "ask": ASK, "search": SEARCH}
REWARDS = RewardsConfig(weights={"judge": 2.0})  # mixed: edit 2.0, ask 1.6, search 0


def _rows(trajectories, prefix: str, per_behaviour: int) -> list[dict]:
    rows = []
    for i in range(per_behaviour):
        for name, (text, outcome, judge, signals) in BEHAVIOURS.items():
            row = trajectories.row(f"{prefix}-{name}-{i}", text, outcome, signals=signals, task_family="orchestrator")
            rows.append(row | {"reward_components": [("outcome", outcome), ("judge", judge)]})
    return rows


def _evidence(rows: list[dict], drift: dict | None = None) -> GateEvidence:
    holdout = [from_row(row, 0) for row in rows]
    rewards = mixed_rewards(holdout, 0, REWARDS)
    advantages = compute_advantages(holdout, rewards, Baselines(), AdvantageConfig())
    return GateEvidence(tuple(holdout), tuple(rows), tuple(rewards), tuple(advantages),
                        {"ok": True, "flags": [], "notes": []} if drift is None else drift)


def _judge(candidate, champion, evidence: GateEvidence, monitors=REWARDS.monitors, **config):
    # The demo's max_reward_drop: the sequential reward test (trainer/gate/sequential.py) cannot show a change within
    # the default 0.01 on a few dozen sessions (it needs several hundred), whatever their spread. REWARDS mixes to
    # rewards in [0, 2]: the range the test's guarantee rests on.
    config.setdefault("max_reward_drop", 0.5)
    config.setdefault("reward_range", (0.0, 2.0))
    return evaluate(candidate, champion, evidence, GateConfig(**config), LossConfig(), monitors, max_seq_len=64)


def _mixture(model, tokenizer, steps: int = 100, lr: float = 3e-3):
    """The tiny policy trained by maximum likelihood on the three behaviours in equal shares: it then plays each
    about a third of the time, and 12 sessions of each are what it would serve. The reward test assumes held-out
    sessions are draws from the policy that served them (importance weights average to at most 1 over them); a
    fixed set of texts the behaviour almost never plays breaks that, and any candidate that made them likelier
    would look better than it is."""
    model = copy.deepcopy(model).train()
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    ids = torch.tensor([tokenizer(text)["input_ids"] for text, *_ in BEHAVIOURS.values()])
    mask = torch.ones_like(ids, dtype=torch.float)
    mask[:, :2] = 0  # the prompt
    for _ in range(steps):
        loss = -(token_logprobs(model, ids, torch.ones_like(ids)) * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _train(model, trajectories, preferred: str, steps: int = 5, lr: float = 1e-3):
    """REINFORCE on fresh (not held-out) rows: reward 1 for the preferred behaviour, 0 for the others."""
    model = copy.deepcopy(model).train()
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batch = [trajectories.tokenizer(text)["input_ids"] for text, *_ in BEHAVIOURS.values()]
    ids = torch.tensor(batch)  # every text has the same number of tokens
    mask = torch.ones_like(ids, dtype=torch.float)
    mask[:, :2] = 0  # the prompt
    advantage = torch.tensor([2 / 3 if name == preferred else -1 / 3 for name in BEHAVIOURS])
    for _ in range(steps):
        logp = token_logprobs(model, ids, torch.ones_like(ids))
        loss = -(advantage[:, None] * logp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _degrade(model, scale: float = 1.0):
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * scale)
    return model


@pytest.fixture(scope="module")
def champion(tiny_policy_dir, trajectories):
    return _mixture(load_policy(tiny_policy_dir), trajectories.tokenizer)


@pytest.fixture(scope="module")
def served(tiny_policy_dir, champion) -> TrajectoryFactory:
    """Rows whose behaviour logprobs are the champion's: it served the held-out sessions."""
    factory = TrajectoryFactory(tiny_policy_dir)
    factory.model = champion
    return factory


def test_the_champion_plays_each_behaviour_about_a_third_of_the_time(champion, served):
    plays = [math.exp(sum(served.row("p", text, 0.0)["behaviour_logprobs"])) for text, *_ in BEHAVIOURS.values()]
    assert all(0.25 < p < 0.42 for p in plays) and sum(plays) > 0.9, plays


@pytest.fixture(scope="module")
def held_out(served) -> GateEvidence:
    # The champion's own sessions, in the shares it plays them (see _mixture). 24 of each: at 12 the improved
    # candidate's sequential bound was -0.54, just short of the drop, and the gate deferred it for more evidence.
    return _evidence(_rows(served, "held", 24))


def test_gate_verdicts_on_degraded_inverted_hacking_and_improved_candidates(champion, trajectories, held_out):
    # The champion plays three texts only (see _mixture): a few REINFORCE steps move its KL by about 0.7-1.6 nats,
    # which healthy training of this tiny policy does; the tolerances sit above that and far below a degraded one.
    # Sub-agents per task may move by 30 % of the champion's figure before it is flagged (the default 50 % is more than
    # these few steps move it): the improved candidate's move must pass that and still not be refused.
    subagents = DriftThreshold(direction="both", max_rel=0.3)
    monitors = REWARDS.monitors.model_copy(update={"thresholds": {**REWARDS.monitors.thresholds,
                                                                  "mean.subagents_per_task": subagents}})
    moves = {"max_kl": 2.0, "max_nll_increase": 2.0, "monitors": monitors}
    verdicts = {
        "degraded": _judge(_degrade(copy.deepcopy(champion)), champion, held_out, **moves),
        "inverted": _judge(_train(champion, trajectories, preferred="search"), champion, held_out, **moves),
        "hacking": _judge(_train(champion, trajectories, preferred="ask"), champion, held_out, **moves),
        "improved": _judge(_train(champion, trajectories, preferred="edit"), champion, held_out, **moves),
    }
    for name, report in verdicts.items():
        print(name, report.decision, report.reasons, json.dumps(report.figures, sort_keys=True))
    degraded, inverted, hacking, improved = verdicts.values()
    assert not degraded.passed and any(reason.startswith("kl ") for reason in degraded.reasons)
    assert not inverted.passed and any("expected reward" in reason for reason in inverted.reasons)
    assert inverted.figures["reward_change"] < 0
    # The fooled labels even reward asking: only the monitor of the candidate's own outputs catches it.
    assert not hacking.passed and hacking.figures["reward_change"] > 0
    assert any("rate.clarifying" in reason for reason in hacking.reasons)
    assert improved.passed, improved.reasons
    assert improved.figures["reward_change"] > 0 and improved.figures["monitor.rate.clarifying"] < 0
    # Sub-agents per task rose past the monitor's threshold, with the verified outcome: not refused for it.
    assert improved.figures["monitor.mean.subagents_per_task"] > subagents.max_rel * (3 + 1 + 1) / 3


def test_the_same_policy_passes_with_zero_figures(champion, held_out):
    same = _judge(copy.deepcopy(champion), champion, held_out)
    assert same.passed, same.reasons
    assert same.figures["kl"] < 1e-9 and abs(same.figures["reward_change"]) < 1e-9
    assert same.figures["effective_fraction"] == pytest.approx(1.0)


def test_the_gate_fails_closed(champion, trajectories, held_out):
    missing_drift = _judge(champion, champion, GateEvidence(*[getattr(held_out, f) for f in (
        "holdout", "rows", "rewards", "advantages")], drift=None))
    assert not missing_drift.passed and "no drift report" in missing_drift.reasons[0]

    partial = GateEvidence(held_out.holdout, held_out.rows, held_out.rewards[:-1], held_out.advantages,
                           held_out.drift)
    assert "partial evidence" in _judge(champion, champion, partial).reasons[0]

    nan_reward = GateEvidence(held_out.holdout, held_out.rows, (float("nan"), *held_out.rewards[1:]),
                              held_out.advantages, held_out.drift)
    report = _judge(champion, champion, nan_reward)
    assert not report.passed and any("non-finite figures" in reason for reason in report.reasons)

    nan_weights = copy.deepcopy(champion)
    next(nan_weights.parameters()).data.fill_(float("nan"))
    assert "non-finite" in _judge(nan_weights, champion, held_out).reasons[0]
    assert not _judge(champion, champion, _evidence([])).passed  # nothing to judge on

    drifted = _judge(champion, champion, _evidence(list(held_out.rows), drift={"ok": False, "flags": [
        {"figure": "rate.clarifying", "reason": "|delta| 0.2 > 0.05"}]}))
    assert not drifted.passed and "rate.clarifying" in drifted.reasons[0]


def test_a_monitor_with_one_row_is_not_judged_as_with_none(champion, served):
    # Sub-agents per task is measured on orchestrator rows only: one held-out row gives no error to judge a move
    # by, and no more evidence than none, which passes; the figures say why it was not judged.
    coding = [served.row(f"c-{i}", EDIT[0], 1.0, signals={"tool_calls": 1.0, "turns": 1.0}) for i in range(5)]
    orchestrator = served.row("o-0", EDIT[0], 1.0, signals=EDIT[3], task_family="orchestrator")
    # The reward test is not what this is about: a drop of the whole reward range turns it off.
    few = {"min_effective_sessions": 2, "max_reward_drop": 2.0}
    alone = _judge(copy.deepcopy(champion), champion, _evidence(coding), **few)
    report = _judge(copy.deepcopy(champion), champion, _evidence([*coding, orchestrator]), **few)
    assert alone.passed and report.passed, report.reasons
    assert report.figures["monitor.mean.subagents_per_task_rows"] == 1
    assert "monitor.mean.subagents_per_task_se" not in report.figures
    two = _judge(copy.deepcopy(champion), champion, _evidence([*coding, orchestrator, served.row(
        "o-1", EDIT[0], 1.0, signals=EDIT[3], task_family="orchestrator")]), **few)
    assert two.figures["monitor.mean.subagents_per_task_rows"] == 2
    assert isinstance(two.figures["monitor.mean.subagents_per_task_se"], float)


def test_gate_scores_each_segment_as_its_own_sequence(champion, served):
    rows = [served.segmented_row(f"s-{i}", ["fix the file : edit file done", "summary : fix file edit done",
                                                   "ask : search file"][i:], 1.0) for i in range(2)]
    rows.append(served.row("old", "fix the file : ask ask ask", 0.0))  # no segment_starts: one segment
    evidence = _evidence(rows)
    few = REWARDS.monitors.model_copy(update={"min_trajectories": 0})  # 3 sessions: this is about scoring only
    report = _judge(copy.deepcopy(champion), champion, evidence, monitors=few, min_effective_sessions=2,
                    max_reward_drop=2.0)  # nor the reward test: a drop of the whole range turns it off
    assert report.passed and report.figures["kl"] < 1e-9
    # Behaviour logprobs come from scoring each segment alone: the served-token NLL is exactly theirs.
    served = [-lp for t in evidence.holdout for s, e in t.segments() for lp, m in
              zip(t.behaviour_logprobs[s + 1:e], t.loss_mask[s + 1:e]) if m]
    assert report.figures["holdout_tokens"] == len(served) == sum(t.trainable_tokens for t in evidence.holdout)
    assert report.figures["candidate_nll"] == pytest.approx(sum(served) / len(served), abs=1e-5)


@pytest.mark.slow
def test_gate_refuses_a_degraded_candidate_and_records_why(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=4)
    config.trainer.gate.max_reward_drop = 2.0  # 6 held-out sessions show no reward change: the KL check refuses here
    register_base(config, tiny_policy_dir, say=lambda *_: None)
    commit_batch(config.table.trajectories_uri, trajectories.batch("g", 24), "batch-g", 0)
    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    assert trainer.run(follow=False) == 1
    registry = Registry(config.mlflow)
    good = registry.alias_version(names.ALIAS_CANDIDATE)
    assert registry.alias_version(names.ALIAS_CHAMPION) == good, [l for l in lines if "gate" in l]  # promoted

    _degrade(trainer.policies.activate(SHARED_GROUP).module)  # a broken run: weights far from anything sensible
    trainer.state.groups[SHARED_GROUP].step += 1  # as if one more (broken) step had run
    trainer.groups[SHARED_GROUP].window.steps = 1
    result = trainer.maybe_publish(trainer.maybe_checkpoint(SHARED_GROUP, force=True))
    assert result == 1
    assert trainer.groups[SHARED_GROUP].gates.drain(timeout_s=300)  # judged beside training (trainer.gate.background)
    trainer.collect_verdicts()
    bad = registry.alias_version(names.ALIAS_CANDIDATE)
    assert bad != good
    assert registry.alias_version(names.ALIAS_CHAMPION) == good  # champion did not move
    tags = registry.tags(bad)
    assert tags[names.TAG_GATE_DECISION] == "fail"
    report = json.loads(tags[names.TAG_GATE_REPORT])
    assert report["champion"] == good and report["figures"]["kl"] > GateConfig().max_kl and report["reasons"]
    assert any(line.startswith(f"gate v{bad} vs v{good}: fail") for line in lines)
    assert trainer.state.groups[SHARED_GROUP].gate_refusals == 1
    assert "blocked: gate refused 1" in trainer.blocked()
