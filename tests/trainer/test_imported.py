"""Imported trajectories (`liverl import`: no behaviour logprobs) train by reward-weighted SFT, never by a ratio."""

from __future__ import annotations

import math

import pytest
import torch

from liverl.config import load_config
from liverl.config.trainer import AdvantageConfig, LossConfig, StalenessConfig
from tests.trainer.conftest import make_row
from trainer.io.served_lineage import ServedLineage
from trainer.step.advantages import Baselines, step_signals
from trainer.step.batching import Sample, collate_rows
from trainer.step.builder import StepPlan
from trainer.step.losses import token_losses
from trainer.step.packing import micro_batches
from trainer.step.rewarding import mixed_rewards
from trainer.step.staleness import assess
from trainer.step.trajectory import from_row

HOUR_MS = 3_600_000
IMPORTED = {"origin": "import:openai-chat", "policy_versions": ["import"], "span_policy_versions": ["import"]}


def _imported(row: dict) -> dict:
    """A row as the pipelines build it from imported traces: origin set, version "import", behaviour logprobs 0."""
    return row | IMPORTED | {"behaviour_logprobs": [0.0] * len(row["token_ids"])}


def _mixed_row() -> tuple[torch.Tensor, object]:
    """One packed row: a served window [1, 2, 3] then an imported one [4, 5, 6] (token 0 of each is context)."""
    served = Sample([1, 2, 3], [0, 1, 1], [0.0, math.log(0.5), math.log(0.4)], advantage=1.5, weight=1.0)
    imported = Sample([4, 5, 6], [0, 1, 1], [0.0, 0.0, 0.0], advantage=0.7, weight=1.0, supervised=True)
    batch = collate_rows([[served, imported]])
    # log π of each token; -30 on an imported token: against its behaviour "logprob" 0, |log r| = 30.
    logp = torch.tensor([[0.0, math.log(0.6), math.log(0.3), 0.0, -30.0, math.log(0.2)]], requires_grad=True)
    return logp, batch


def test_a_packed_row_marks_imported_tokens_one_by_one():
    _, batch = _mixed_row()
    assert batch.supervised.tolist() == [[False, False, False, True, True, True]]
    assert batch.loss_mask.tolist() == [[0.0, 1.0, 1.0, 0.0, 1.0, 1.0]]


def test_imported_tokens_get_minus_w_log_p_and_served_ones_the_clipped_off_policy_loss():
    logp, batch = _mixed_row()
    result = token_losses(logp, batch.behaviour_logprobs, batch.advantages, LossConfig(kind="ppo"), batch.loss_mask,
                          supervised=batch.supervised)
    (result.loss * batch.loss_mask).sum().backward()
    # Served, A = 1.5: r = 0.6/0.5 = 1.2 inside [0.8, 1.28]: -r·A; r = 0.3/0.4 = 0.75 < 0.8 with A > 0: the
    # unclipped -r·A is the minimum. Imported, w = 0.7: -w·log π, gradient -w, whatever the behaviour column says.
    expected = [0.0, -1.2 * 1.5, -0.75 * 1.5, 0.0, -0.7 * -30.0, -0.7 * math.log(0.2)]
    assert result.loss[0].tolist() == pytest.approx(expected, abs=1e-5)
    assert logp.grad[0].tolist() == pytest.approx([0.0, -1.8, -1.125, 0.0, -0.7, -0.7], abs=1e-5)
    assert result.ratio[0, 3:].tolist() == [1.0, 1.0, 1.0] and result.clipped[0, 3:].tolist() == [0.0, 0.0, 0.0]
    # Read as served, the same token would be weighted by a ratio of e^-20 (clamped): it would learn nothing.
    unflagged = token_losses(logp, batch.behaviour_logprobs, batch.advantages, LossConfig(kind="ppo"), batch.loss_mask)
    assert abs(unflagged.loss[0, 4].item()) < 1e-6


@pytest.mark.parametrize("kind", ["ppo", "tis", "kimi", "cispo"])
def test_every_variant_trains_imported_tokens_by_sft_with_finite_gradients(kind):
    logp, batch = _mixed_row()
    result = token_losses(logp, batch.behaviour_logprobs, batch.advantages, LossConfig(kind=kind), batch.loss_mask,
                          supervised=batch.supervised)
    (result.loss * batch.loss_mask).sum().backward()
    assert torch.isfinite(result.loss).all() and torch.isfinite(logp.grad).all()
    assert result.loss[0, 4:].tolist() == pytest.approx([21.0, -0.7 * math.log(0.2)], abs=1e-5)
    assert logp.grad[0, 4:].tolist() == pytest.approx([-0.7, -0.7], abs=1e-6)


def test_only_successful_imports_get_a_weight_and_none_moves_the_baselines(trajectories):
    rows = [trajectories.row("served-good", "fix the file : edit file done", 1.0),
            trajectories.row("served-bad", "fix the file : ask ask ask", 0.0),
            _imported(trajectories.row("import-good", "fix the file : edit file done", 1.0)),
            _imported(trajectories.row("import-bad", "fix the file : ask ask ask", 0.2))]
    plan = [from_row(row, 0) for row in rows]
    assert [t.imported for t in plan] == [False, False, True, True]
    baselines = Baselines()
    signals = step_signals(plan, [1.0, 0.0, 1.0, 0.2], baselines, AdvantageConfig(), LossConfig(import_weight=0.7))
    # Served: each against the other's reward (coding is first seen); default import_min_reward 0.5: the failed
    # import is 0.
    assert signals == pytest.approx([1.0, -1.0, 0.7, 0.0])
    assert baselines.means == {"coding": 0.5}  # the served pair's mean; with the imports it would be 0.55


def _gradient(model, plan: list, config) -> list[torch.Tensor]:
    """The gradient of one step's objective, built as run_step builds it (without DeepSpeed)."""
    from trainer.step.training_step import batch_loss, step_objective, step_samples

    tc = config.trainer
    rewards = mixed_rewards(plan, 1, config.rewards)
    signals = step_signals(plan, rewards, Baselines(), tc.advantages, tc.loss)
    samples = [sample for _, sample in step_samples(plan, [1.0] * len(plan), signals, tc.max_seq_len)]
    batches = [collate_rows(rows) for rows in micro_batches(samples, tc.deepspeed)]
    tokens = sum(batch.trained_tokens for batch in batches)
    model.zero_grad()
    for batch in batches:
        weights, losses, _ = batch_loss(model, batch, tc.loss)
        step_objective(losses, weights, tokens).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_an_unsuccessful_import_contributes_nothing_by_default(tiny_policy_dir, trajectories):
    from trainer.io.policy_io import load_policy

    config = load_config(environ={}, overrides=[])
    model = load_policy(tiny_policy_dir)
    served = [from_row(trajectories.row(f"s-{i}", text, float(i)), 0)
              for i, text in enumerate(["fix the file : ask ask ask", "fix the file : edit file done"])]
    failed = from_row(_imported(trajectories.row("i-bad", "fix the file : search search done", 0.0)), 0)
    succeeded = from_row(_imported(trajectories.row("i-good", "fix the file : search search done", 1.0)), 0)
    alone = _gradient(model, served, config)
    with_failed = _gradient(model, [*served, failed], config)
    assert all(torch.equal(a, b) for a, b in zip(alone, with_failed))
    with_success = _gradient(model, [*served, succeeded], config)
    assert any(not torch.allclose(a, b) for a, b in zip(alone, with_success))


def test_staleness_keeps_imported_rows_and_ages_them_by_wall_time_only():
    now = 1_000 * HOUR_MS
    row = _imported(make_row("i", "", [1, 2, 3], [0, 1, 1], [0.0] * 3, first_served_ms=now))
    unknown_time = from_row(row | {"first_served_ms": None}, 0)
    lineage = ServedLineage((1, 3, 9, 12))  # four promotions: "import" is on no timeline
    for config in (StalenessConfig(), StalenessConfig(max_version_lag=0)):
        fresh = assess(lineage.on_timeline(from_row(row, 0)), lineage.current, now, config)
        assert (fresh.version_lag, fresh.weight) == (0, 1.0)
        assert assess(lineage.on_timeline(unknown_time), lineage.current, now, config).weight == 1.0
    old = from_row(row | {"first_served_ms": now - 30 * HOUR_MS}, 0)
    assert assess(old, "4", now, StalenessConfig()).weight == 1.0  # a backfill: no import age limit by default
    limited = StalenessConfig(max_import_age_hours=24.0)
    assert assess(old, "4", now, limited).weight == 0.0  # beyond its limit, dropped by the default policy
    assert assess(old, "4", now, limited.model_copy(update={"policy": "downweight", "downweight": 0.5})).weight == 0.5
    served_as_import = from_row(row | {"origin": ""}, 0)  # a served row naming no real version stays untrainable
    assert assess(served_as_import, "4", now, StalenessConfig()).weight == 0.0


def test_a_real_deepspeed_step_on_a_mixed_batch(tiny_policy_dir, trajectories):
    from trainer.io.policy_io import load_policy
    from trainer.step.engine import build_engine
    from trainer.step.training_step import run_step

    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", "0", "--trainer.deepspeed.gradient_accumulation_steps", "2"])
    rows = [trajectories.row("m-served-good", "fix the file : edit file done", 1.0),
            trajectories.row("m-served-bad", "fix the file : ask ask ask", 0.0),
            _imported(trajectories.row("m-import", "fix the file : search search done", 1.0))]
    plan = StepPlan(trajectories=[from_row(row, 0) for row in rows], weights=[1.0] * 3, lags=[0] * 3)
    imported_ids = torch.tensor([rows[2]["token_ids"]])
    engine = build_engine(load_policy(tiny_policy_dir), config.trainer)

    def imported_log_likelihood() -> float:
        from trainer.step.batching import token_logprobs

        with torch.no_grad():
            logp = token_logprobs(engine.module, imported_ids, torch.ones_like(imported_ids))
        return float((logp[0] * torch.tensor(rows[2]["loss_mask"])).sum())

    before, likelihood = [p.detach().clone() for p in engine.module.parameters()], imported_log_likelihood()
    metrics = run_step(engine, plan, 1, Baselines(), config).metrics
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    # The served rows are on-policy: any imported token in the KL (behaviour "logprob" 0) would make it ~1.
    assert abs(metrics["kl"]) < 1e-4 and metrics["clip_fraction"] == 0.0, metrics
    trained = [sum(row["loss_mask"][1:]) for row in rows]
    assert metrics["imported"] == 1.0 and metrics["imported_fraction"] == pytest.approx(trained[2] / sum(trained))
    assert any(not torch.equal(a, b) for a, b in zip(before, engine.module.parameters()))
    assert imported_log_likelihood() > likelihood  # SFT on the successful import raised its tokens' likelihood

    # A step of nothing but a failed import trains nothing: no micro-batch, no optimizer step.
    failed = from_row(_imported(trajectories.row("m-failed", "fix the file : ask ask ask", 0.0)), 0)
    after = [p.detach().clone() for p in engine.module.parameters()]
    metrics = run_step(engine, StepPlan(trajectories=[failed], weights=[1.0], lags=[0]), 2, Baselines(), config).metrics
    assert metrics["loss"] == 0.0 and metrics["segments"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(after, engine.module.parameters()))
