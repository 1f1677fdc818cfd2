"""One optimizer step shared by data-parallel ranks: every rank sees the whole plan, each trains every world-th
micro-batch of it.

Every rank computes the step's rewards, advantages and micro-batches from the same plan (rank 0 broadcast it),
so advantages that depend on the whole step (leave-one-out groups, batch normalisation, running baselines)
are the single-rank ones, and every rank knows the step's trained-token count without asking. The
micro-batches are those one rank would build for world × accumulation micro-batches, dealt round-robin:
micro-batch i goes to rank i % world, so every rank gets the same count (a multiple of its accumulation)
and reaches DeepSpeed's gradient allreduce together. DeepSpeed averages the ranks' gradients, so each
rank's objective is scaled by the world size: the update is the single-rank update of the same step, up to
the order of floating-point sums.
"""

from __future__ import annotations

import time

from liverl.config import LiverlConfig
from trainer.advantages import Baselines, step_signals
from trainer.batching import collate_rows
from trainer.packing import micro_batches
from trainer.ranks import Ranks
from trainer.rewarding import mixed_rewards
from trainer.step_builder import StepPlan
from trainer.training_step import (SUMMED, StepResult, batch_loss, filler, loss_tokens, micro_batch_sums,
                                   needs_logits, step_objective, step_result, step_samples)


def run_sharded_step(engine, plan: StepPlan, step: int, baselines: Baselines, config: LiverlConfig, ranks: Ranks,
                     reference=None) -> tuple[StepResult, list[str]]:
    """(the step's result, summed over ranks; the trajectory ids this rank trained)."""
    tc = config.trainer
    started = time.perf_counter()
    rewards = mixed_rewards(plan.trajectories, step, config.rewards)
    signals = step_signals(plan.trajectories, rewards, baselines, tc.advantages, tc.loss)
    owned = step_samples(plan.trajectories, plan.weights, signals, tc.max_seq_len)  # (trajectory id, sample)
    samples = [sample for _, sample in owned]
    groups = micro_batches(samples, tc.deepspeed)
    per_step = tc.deepspeed.gradient_accumulation_steps * ranks.world
    # Zero-weight fillers complete the accumulation; no sample at all (only failed imports): no optimizer step.
    groups += [[[filler(samples[0])]]] * (-len(groups) % per_step) if samples else []
    batches = [collate_rows(rows) for rows in groups]
    owner_of = {id(sample): owner for owner, sample in owned}
    mine = deal(len(batches), ranks.world, ranks.rank)
    # The whole step's tokens with a loss term: each rank counts its own micro-batches, then all ranks add up.
    own = [batches[i].to(engine.device) for i in mine]
    score = ranks.any(needs_logits(own, tc.loss))
    tokens = max(int(ranks.sum([float(loss_tokens(engine, own, tc.loss, score))])[0]), 1)
    trained_ids = sorted({owner_of[id(s)] for i in mine for row in groups[i] for s in row if id(s) in owner_of})
    sums = [0.0] * len(SUMMED)  # Σ over this rank's tokens
    for batch in own:
        weights, losses, scored = batch_loss(engine, batch, tc.loss, reference)
        # DeepSpeed divides each micro-batch loss by the accumulation and averages gradients over the ranks.
        engine.backward(step_objective(losses, weights, tokens) * per_step)
        engine.step()
        sums = [a + b for a, b in zip(sums, micro_batch_sums(batch, weights, losses, scored))]
    summed = dict(zip(SUMMED, ranks.sum(sums)))
    result = step_result(plan, rewards, samples, batches, summed, tokens, time.perf_counter() - started)
    return result, trained_ids


def deal(count: int, world: int, rank: int) -> range:
    """The micro-batch indices rank `rank` trains out of `count`: every world-th, starting at its own."""
    return range(rank, count, world)
