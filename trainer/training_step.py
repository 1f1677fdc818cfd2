"""One optimizer step: rewards -> advantages -> token-budget micro-batches -> DeepSpeed backward/step."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from liverl.config import LiverlConfig
from trainer.advantages import Baselines, compute_advantages
from trainer.batching import collate, pack, token_logprobs
from trainer.losses import behaviour_kl, token_losses
from trainer.rewarding import mixed_rewards
from trainer.staleness import describe
from trainer.step_builder import StepPlan, to_samples


@dataclass(frozen=True)
class StepResult:
    metrics: dict[str, float]
    staleness: str  # the batch's staleness distribution, "lag:count ..."
    skipped: dict[str, int]

    def line(self, step: int, table_versions: list[int]) -> str:
        m = self.metrics
        skipped = f" skipped {sum(self.skipped.values())}" if self.skipped else ""
        return (
            f"step {step} | loss {m['loss']:+.4f} | reward {m['reward']:+.3f} | stale {self.staleness}{skipped} "
            f"| tok/s {m['tokens_per_s']:.0f} | KL {m['kl']:.4f} | clip {m['clip_fraction']:.2f} "
            f"| traj {int(m['trajectories'])} | table v{','.join(map(str, table_versions))}"
        )


def run_step(engine, plan: StepPlan, step: int, baselines: Baselines, config: LiverlConfig) -> StepResult:
    tc = config.trainer
    started = time.perf_counter()
    rewards = mixed_rewards(plan.trajectories, step, config.rewards)
    advantages = compute_advantages(plan.trajectories, rewards, baselines, tc.advantages)
    samples = [  # one per segment of each trajectory
        sample
        for t, weight, advantage in zip(plan.trajectories, plan.weights, advantages)
        for sample in to_samples(t, weight, tc.max_seq_len, advantage)
    ]
    groups = pack(samples, tc.deepspeed.micro_batch_tokens)
    accumulation = tc.deepspeed.gradient_accumulation_steps
    # DeepSpeed steps every `accumulation` micro-batches: a short step is padded with zero-weight copies.
    # Only a lone trajectory whose segments overflow the step's budget needs more; it then spans whole
    # optimizer steps (padded to a multiple) rather than leaking gradients into the next trainer step.
    groups += [[replace(groups[-1][0], weight=0.0)]] * (-len(groups) % accumulation)
    batches = [collate(group).to(engine.device) for group in groups]
    total_masked = sum(batch.masked_tokens for batch in batches)
    sums = {"loss": 0.0, "kl": 0.0, "clip": 0.0}
    for batch in batches:
        logp = token_logprobs(engine, batch.token_ids, batch.attention_mask)
        result = token_losses(logp, batch.behaviour_logprobs, batch.advantages, tc.loss)
        masked_sum = (result.loss * batch.loss_mask).sum()
        # Token-level mean over the whole step; DeepSpeed divides each micro-batch loss by `accumulation`.
        engine.backward(masked_sum / total_masked * accumulation)
        engine.step()
        sums["loss"] += masked_sum.item()
        sums["kl"] += float((behaviour_kl(logp, batch.behaviour_logprobs) * batch.loss_mask).sum())
        sums["clip"] += float((result.clipped * batch.loss_mask).sum())
    elapsed = time.perf_counter() - started
    real_tokens = sum(len(s.token_ids) for s in samples)
    metrics = {
        "loss": sums["loss"] / total_masked,
        "reward": sum(rewards) / len(rewards),
        "kl": sums["kl"] / total_masked,
        "clip_fraction": sums["clip"] / total_masked,
        "tokens_per_s": real_tokens / elapsed,
        "trajectories": float(len(plan.trajectories)),
        "segments": float(len(samples)),
        "staleness_mean": sum(max(lag, 0) for lag in plan.lags) / max(len(plan.lags), 1),
        "staleness_max": float(max(plan.lags, default=0)),
        "dropped_stale": float(plan.skipped.get("stale", 0)),
        "weight_mean": sum(plan.weights) / len(plan.weights),
    }
    return StepResult(metrics=metrics, staleness=describe(plan.lags), skipped=dict(plan.skipped))

