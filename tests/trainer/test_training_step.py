"""One training step scores each segment of a trajectory as its own sequence, as serving sampled it."""

from __future__ import annotations

import pytest
import torch

from liverl.config import load_config
from trainer.io.policy_io import load_policy
from trainer.step.advantages import Baselines
from trainer.step.batching import collate, pack, token_logprobs, trajectory_samples
from trainer.step.builder import StepPlan
from trainer.step.engine import build_engine, full_state_dict
from trainer.step.trajectory import from_row

# Segment 1 is a fresh prompt (a rewritten context), so its tokens never saw segment 0.
SEGMENTS = [["fix the file : edit file done", "summary : fix file edit done"],
            ["ask the file : search file", "done : edit edit file done", "fix : ask"]]


def _config(micro_batch_tokens: int):
    return load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", "0", "--trainer.deepspeed.precision", "fp32",
        "--trainer.deepspeed.gradient_accumulation_steps", "2",
        "--trainer.deepspeed.micro_batch_tokens", str(micro_batch_tokens),
    ])


def test_each_segment_gets_the_logprobs_of_scoring_it_on_its_own(tiny_policy_dir, trajectories):
    model = load_policy(tiny_policy_dir)
    rows = [trajectories.segmented_row(f"m-{i}", texts, 1.0) for i, texts in enumerate(SEGMENTS)]
    for row in rows:
        trajectory = from_row(row, 0)
        samples = trajectory_samples(trajectory, 1.0, max_seq_len=64)
        assert len(samples) == len(row["segment_starts"])
        with torch.no_grad():  # padded together in one micro-batch, like training does
            batch = collate(samples)
            logp = token_logprobs(model, batch.token_ids, batch.attention_mask)
        for i, (start, end) in enumerate(trajectory.segments()):
            ids = list(trajectory.token_ids[start:end])
            direct = trajectories.segment_logprobs(ids)  # a plain transformers forward on the segment alone
            assert torch.allclose(logp[i, :len(ids)], torch.tensor(direct), atol=1e-5)

    # The bug this guards against: scored as one concatenated sequence, segment 1 sees the wrong context.
    whole = torch.tensor([rows[0]["token_ids"]])
    with torch.no_grad():
        concatenated = token_logprobs(model, whole, torch.ones_like(whole))[0]
    start = rows[0]["segment_starts"][1]
    tail = torch.tensor(trajectories.segment_logprobs(rows[0]["token_ids"][start:]))
    assert (concatenated[start + 1:] - tail[1:]).abs().max() > 1e-3


@pytest.mark.parametrize("micro_batch_tokens", [4096, 32])  # one micro-batch; two (DeepSpeed steps after both)
def test_same_weights_as_serving_give_zero_kl_and_no_clipping(tiny_policy_dir, trajectories, micro_batch_tokens):
    from trainer.step.training_step import run_step

    config = _config(micro_batch_tokens)
    rows = [trajectories.segmented_row(f"k-{i}", texts, float(i % 2)) for i, texts in enumerate(SEGMENTS)]
    rows.append(trajectories.row("old", "fix the file : edit file done", 0.5))  # no segment_starts column
    plan = StepPlan(trajectories=[from_row(row, 0) for row in rows], weights=[1.0] * 3, lags=[0] * 3)
    samples = [s for t in plan.trajectories for s in trajectory_samples(t, 1.0, config.trainer.max_seq_len)]
    assert len(pack(samples, micro_batch_tokens)) == (1 if micro_batch_tokens > 1000 else 2)
    engine = build_engine(load_policy(tiny_policy_dir), config.trainer)
    before = [p.detach().clone() for p in engine.module.parameters()]
    result = run_step(engine, plan, 1, Baselines(), config)
    metrics = result.metrics
    assert abs(metrics["kl"]) < 1e-4 and metrics["clip_fraction"] == 0.0, metrics
    assert metrics["segments"] == 6 and metrics["trajectories"] == 3
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    moved = [not torch.equal(a, b) for a, b in zip(before, engine.module.parameters())]
    assert any(moved), "the step should update the weights"


def test_old_rows_without_segment_starts_still_train(tiny_policy_dir, trajectories):
    from trainer.step.training_step import run_step

    config = _config(4096)
    rows = [trajectories.row(f"o-{i}", text, float(i)) for i, text in
            enumerate(["fix the file : ask ask ask", "fix the file : edit file done"])]
    assert not any("segment_starts" in row for row in rows)  # written before the column existed
    plan = StepPlan(trajectories=[from_row(row, 0) for row in rows], weights=[1.0, 1.0], lags=[0, 0])
    assert all(t.segment_starts == () for t in plan.trajectories)
    engine = build_engine(load_policy(tiny_policy_dir), config.trainer)
    before = [p.detach().clone() for p in engine.module.parameters()]
    metrics = run_step(engine, plan, 1, Baselines(), config).metrics
    assert metrics["segments"] == metrics["trajectories"] == 2
    assert abs(metrics["kl"]) < 1e-4 and metrics["clip_fraction"] == 0.0, metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, engine.module.parameters()))


def test_tokens_are_scored_as_sampled_and_greedy_calls_are_left_out(tiny_policy_dir, trajectories):
    from trainer.gate.scoring import TokenSampling, score_tokens
    from trainer.step.training_step import run_step

    config = _config(4096)
    model = load_policy(tiny_policy_dir)
    row = trajectories.row("sampled", "fix the file : edit file done edit", 1.0)
    n = len(row["token_ids"])  # span 0: [0, 4) greedy; span 1: [4, n) at temperature 0.7
    temperature = [0.0] * 4 + [0.7] * (n - 4)
    ids = torch.tensor([row["token_ids"]])
    with torch.no_grad():  # behaviour logprobs as vLLM records them: processed (greedy: temperature 1)
        served = score_tokens(model, ids, torch.ones_like(ids), TokenSampling(
            torch.tensor([temperature]), torch.ones(1, n), torch.zeros(1, n, dtype=torch.long))).logp[0]
    row |= {"span_starts": [0, 4], "span_ends": [4, n], "span_policy_versions": ["1", "1"],
            "span_temperature": [0.0, 0.7], "span_top_p": [1.0, 1.0], "span_top_k": [0, 0], "schema_version": 2,
            "behaviour_logprobs": [0.0 if m == 0 else float(lp) for m, lp in zip(row["loss_mask"], served)]}
    plan = StepPlan(trajectories=[from_row(row, 0)], weights=[1.0], lags=[0])
    metrics = run_step(build_engine(model, config.trainer), plan, 1, Baselines(), config).metrics
    assert abs(metrics["kl"]) < 1e-4 and metrics["clip_fraction"] == 0.0, metrics
    greedy = sum(row["loss_mask"][1:4])  # trained tokens of the greedy span, excluded by default
    assert greedy > 0 and metrics["excluded_fraction"] == pytest.approx(greedy / sum(row["loss_mask"][1:]))


def test_tokens_of_a_call_without_recorded_sampling_get_no_loss_term(tiny_policy_dir, trajectories):
    from liverl.config.trainer import LossConfig
    from trainer.step.batching import collate
    from trainer.step.training_step import batch_loss

    row = trajectories.row("unknown", "fix the file : edit file done edit", 1.0)
    n = len(row["token_ids"])  # span 0: [0, 4) sampled at 0.7 / top-p 0.9; span 1: [4, n) recorded nothing
    row |= {"span_starts": [0, 4], "span_ends": [4, n], "span_policy_versions": ["1", "1"],
            "span_temperature": [0.7, float("nan")], "span_top_p": [0.9, 1.0], "span_top_k": [0, 0]}
    batch = collate(trajectory_samples(from_row(row, 0), 1.0, max_seq_len=64))
    with torch.no_grad():
        weights, _, scored = batch_loss(load_policy(tiny_policy_dir), batch, LossConfig())
    trained = batch.loss_mask[0] > 0
    assert trained[4:].all() and scored.unscorable[0, 4:].all()  # unknown: never scored as temperature 1
    assert (weights[0, 4:] == 0).all() and (weights[0, 2:4] > 0).all()


def _greedy_then_sampled(trajectories, trajectory_id: str, greedy_masked: bool) -> dict:
    """A row of two calls: [0, 4) greedy, [4, n) at temperature 0.7; greedy_masked False: the greedy call's
    tokens carry no loss mask at all (what excluding them must be equivalent to)."""
    row = trajectories.row(trajectory_id, "fix the file : edit file done edit", 1.0)
    n = len(row["token_ids"])
    mask = row["loss_mask"] if greedy_masked else [0] * 4 + row["loss_mask"][4:]
    return row | {"span_starts": [0, 4], "span_ends": [4, n], "span_policy_versions": ["1", "1"],
                  "span_temperature": [0.0, 0.7], "span_top_p": [1.0, 1.0], "span_top_k": [0, 0], "loss_mask": mask}


def test_excluded_tokens_do_not_count_in_the_token_mean(tiny_policy_dir, trajectories):
    from liverl.config.trainer import LossConfig
    from trainer.step.training_step import batch_loss, loss_tokens, run_step, step_objective

    gradients, losses = {}, {}
    for greedy_masked in (True, False):
        row = _greedy_then_sampled(trajectories, f"x-{greedy_masked}", greedy_masked)
        batch = collate(trajectory_samples(from_row(row, 0), 1.0, max_seq_len=64, advantage=1.0))
        model = load_policy(tiny_policy_dir)
        weights, token_loss, _ = batch_loss(model, batch, LossConfig())
        step_objective(token_loss, weights, loss_tokens(model, [batch], LossConfig())).backward()
        gradients[greedy_masked] = torch.cat([p.grad.flatten() for p in model.parameters()])
        config = _config(4096)
        other = trajectories.row("x-other", "fix the file : ask ask ask", 0.0)  # so advantages are not 0
        plan = StepPlan(trajectories=[from_row(row, 0), from_row(other, 0)], weights=[1.0] * 2, lags=[0] * 2)
        losses[greedy_masked] = run_step(build_engine(load_policy(tiny_policy_dir), config.trainer), plan, 1,
                                         Baselines(), config).metrics["loss"]
    # The greedy tokens are excluded (unscorable): the step is that of the sampled tokens alone, not shrunk by
    # the excluded share (2 of 6 loss-masked tokens here: before, the gradient was 4/6 of this one).
    # Only loss-masked tokens are projected to the vocabulary, so the two runs project 6 and 4 positions: float
    # rounding then differs, far below the 1/3 the bug took off.
    assert gradients[False].abs().max() > 0
    assert torch.allclose(gradients[True], gradients[False], rtol=1e-5, atol=1e-6)
    assert losses[False] != 0 and losses[True] == pytest.approx(losses[False], rel=1e-5)


def test_windows_after_the_first_of_a_long_segment_are_unscorable(tiny_policy_dir, trajectories):
    """Serving sampled every token of a segment with the whole segment before it; a later window holds only
    max_seq_len tokens of it, so its logprobs differ from serving's and its tokens get no importance ratio."""
    from liverl.config.trainer import LossConfig
    from trainer.step.batching import score_batch
    from trainer.step.training_step import batch_loss, loss_tokens

    text = "fix the file : edit file done search file ask edit done fix file search done edit ask file"
    row = trajectories.row("long", text, 1.0)  # behaviour logprobs: the whole segment in context
    trajectory = from_row(row, 0)
    samples = trajectory_samples(trajectory, 1.0, max_seq_len=8, advantage=1.0)
    assert len(samples) > 2 and [s.position_offset > 0 for s in samples] == [False] + [True] * (len(samples) - 1)
    batch = collate(samples)
    model = load_policy(tiny_policy_dir)
    with torch.no_grad():
        scored = score_batch(model, batch)
        weights, _, _ = batch_loss(model, batch, LossConfig())
    trained = batch.loss_mask > 0
    assert not scored.unscorable[0][trained[0]].any()  # the first window holds its whole context
    assert torch.allclose(scored.logp[0][trained[0]], batch.behaviour_logprobs[0][trained[0]], atol=1e-5)
    later = trained[1:]
    gap = (scored.logp[1:][later] - batch.behaviour_logprobs[1:][later]).abs().max()
    print(f"\nlargest |window logprob - served logprob| on later windows: {gap:.3g}")
    assert gap > 1e-4  # the cut context really changes the logprobs
    assert scored.unscorable[1:][later].all() and (weights[1:][later] == 0).all()
    assert loss_tokens(model, [batch], LossConfig()) == int(trained[0].sum())
    kept = LossConfig(exclude_unscorable=False)  # the operator's choice: train them with the cut context
    assert loss_tokens(model, [batch], kept) == int(trained.sum())


def test_a_packed_step_trains_like_a_padded_one(tiny_policy_dir, trajectories):
    from trainer.step.training_step import run_step

    rows = [trajectories.segmented_row(f"p-{i}", texts, float(i % 2)) for i, texts in enumerate(SEGMENTS)]
    rows.append(trajectories.row("p-old", "fix the file : edit file done", 0.5))
    plan = StepPlan(trajectories=[from_row(row, 0) for row in rows], weights=[1.0, 0.5, 1.0], lags=[0] * 3)
    results, weights = {}, {}
    for packed in (True, False):
        config = _config(4096)  # one micro-batch (and a filler) either way: the same single optimizer step
        config.trainer.deepspeed.pack_sequences = packed
        engine = build_engine(load_policy(tiny_policy_dir), config.trainer)
        results[packed] = run_step(engine, plan, 1, Baselines(), config)
        weights[packed] = [p.detach().clone() for p in engine.module.parameters()]
    packed, padded = results[True].metrics, results[False].metrics
    assert packed["useful_share"] > padded["useful_share"]
    assert packed["loss"] == pytest.approx(padded["loss"], abs=1e-6)
    assert packed["kl"] == pytest.approx(padded["kl"], abs=1e-6)
    worst = max(float((a - b).abs().max()) for a, b in zip(weights[True], weights[False]))
    print(f"\nmax |packed - padded| weight after one step: {worst:.2e}")
    assert worst < 1e-6
    assert "useful" in results[True].line(1, [0])


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_step_of_more_micro_batches_than_its_accumulation_is_one_optimizer_update(tiny_policy_dir, trajectories,
                                                                                      stage):
    # A step may hold more micro-batches than one accumulation: plans merged while it waited for its rows
    # (trainer/step/wait.py; the real demo's steps at one micro-batch of 2048 tokens). It is one update on all of
    # them, the update of one micro-batch holding them all. Before, DeepSpeed updated once per accumulation's worth.
    from trainer.step.packing import micro_batches
    from trainer.step.training_step import run_step

    rows = [trajectories.segmented_row(f"u-{i}", texts, float(i % 2)) for i, texts in enumerate(SEGMENTS)]
    plan = StepPlan(trajectories=[from_row(row, 0) for row in rows], weights=[1.0, 0.5], lags=[0] * 2)
    weights, moments, updates, layouts = {}, {}, {}, {}
    for budget in (4096, 16):
        config = _config(budget)
        config.trainer.deepspeed.gradient_accumulation_steps = 1
        config.trainer.deepspeed.zero_stage = stage
        config.trainer.deepspeed.gradient_clipping = 0.0  # clipping would hide a gradient of the wrong scale
        samples = [s for t in plan.trajectories for s in trajectory_samples(t, 1.0, config.trainer.max_seq_len)]
        layouts[budget] = len(micro_batches(samples, config.trainer.deepspeed))
        engine = build_engine(load_policy(tiny_policy_dir), config.trainer)
        assert run_step(engine, plan, 1, Baselines(), config).metrics["micro_batches"] == layouts[budget]
        updates[budget] = engine.global_steps
        weights[budget] = full_state_dict(engine)
        moments[budget] = _first_moments(engine)
    assert layouts[4096] == 1 and layouts[16] > 1
    assert updates == {4096: 1, 16: 1}, f"optimizer updates in one step: {updates}"
    # Adam's first update is about lr·sign(gradient) whatever its scale; its first moment is 0.1·gradient, so the
    # step's gradient itself (the token mean over the whole step) is the same however many micro-batches held it.
    scale = max(float(m.abs().max()) for m in moments[4096].values())
    assert scale > 0 and moments[4096].keys() == moments[16].keys()
    assert max(float((moments[4096][n] - moments[16][n]).abs().max()) for n in moments[4096]) < 1e-5 * scale
    worst = max(float((weights[4096][name] - weights[16][name]).abs().max()) for name in weights[4096])
    print(f"\nZeRO-{stage}: max |one micro-batch - {layouts[16]} micro-batches| weight after one step: {worst:.2e}")
    assert worst < 1e-6


def _first_moments(engine) -> dict[str, torch.Tensor]:
    """Adam's first moment of every trained parameter, whole (gathered from ZeRO's partitions)."""
    from deepspeed.utils import safe_get_full_optimizer_state

    moments = {}
    for name, param in engine.module.named_parameters():
        if param.requires_grad:
            moment = safe_get_full_optimizer_state(param, "exp_avg")  # None without ZeRO: the optimizer's own state
            moments[name] = (engine.optimizer.state[param]["exp_avg"] if moment is None else moment).detach().clone()
    return moments


def test_a_step_on_any_number_of_ranks_refuses_a_missing_reference_policy():
    from trainer.step.ranks import Ranks
    from trainer.step.training_step import run_step

    config = _config(4096)
    config.trainer.loss.kl_to_reference = 0.1
    plan = StepPlan(trajectories=[], weights=[], lags=[])
    with pytest.raises(ValueError, match="kl_to_reference"):
        run_step(None, plan, 1, Baselines(), config)
    with pytest.raises(ValueError, match="kl_to_reference"):  # on several ranks too
        run_step(None, plan, 1, Baselines(), config, ranks=Ranks(0, 2))
