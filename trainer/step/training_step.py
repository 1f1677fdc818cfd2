"""One optimizer step, on one rank or shared by data-parallel ranks: rewards -> advantages -> windows ->
token-budget micro-batches -> DeepSpeed backward/step.

Micro-batches are packed by default (trainer/step/packing.py: several windows per row, isolated from each other);
the step reports the useful share, real tokens over computed tokens, so padding shows up where it is spent.

Tokens are scored under the sampling processing serving used (trainer/gate/scoring.py); unscorable ones (greedy
calls, unknown sampling, tokens outside the truncated set, ties at its boundary, a later window's tokens) get no
loss term unless loss.exclude_unscorable is false, and do not count in the token mean either.

Imported trajectories (`liverl import`) train by reward-weighted supervised fine-tuning (trainer/step/losses.py):
successful ones with weight loss.import_weight, unsuccessful ones are left out. The behaviour KL and the clip
fraction compare with behaviour logprobs, which they lack: both are means over served tokens only.

Ranks: every rank computes the step's rewards, advantages and micro-batches from the same plan (rank 0
broadcast it), so advantages that depend on the whole step (leave-one-out groups, batch normalisation, running
baselines) are the single-rank ones. The micro-batches are those one rank would build for world × accumulation
micro-batches, dealt round-robin: micro-batch i goes to rank i % world, so every rank gets the same count (a
multiple of its accumulation) and reaches DeepSpeed's gradient allreduce together. DeepSpeed averages the ranks'
gradients, so each rank's objective is scaled by the world size: the update is the single-rank update of the
same step, up to the order of floating-point sums. One rank is the world of one (Ranks()).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from liverl.config import LiverlConfig
from liverl.config.trainer import LossConfig
from trainer.gate.scoring import ScoredTokens, unscorable_by_sampling
from trainer.step.advantages import Baselines, step_signals
from trainer.step.batching import MicroBatch, Sample, collate_rows, score_batch, trajectory_samples
from trainer.step.builder import StepPlan
from trainer.step.losses import TokenLoss, behaviour_kl, token_losses
from trainer.step.packing import micro_batches
from trainer.step.ranks import Ranks
from trainer.step.rewarding import mixed_rewards
from trainer.step.staleness import describe
from trainer.step.trajectory import Trajectory


@dataclass(frozen=True)
class StepResult:
    metrics: dict[str, float]
    staleness: str  # the batch's staleness distribution, "lag:count ..."
    skipped: dict[str, int]
    trained_ids: tuple[str, ...] = ()  # the trajectories this rank trained a window of, sorted

    def line(self, step: int, table_versions: list[int]) -> str:
        m = self.metrics
        skipped = f" skipped {sum(self.skipped.values())}" if self.skipped else ""
        return (
            f"step {step} | loss {m['loss']:+.4f} | reward {m['reward']:+.3f} | stale {self.staleness}{skipped} "
            f"| tok/s {m['tokens_per_s']:.0f} | useful {m['useful_share']:.2f} | KL {m['kl']:.4f} "
            f"| clip {m['clip_fraction']:.2f} | traj {int(m['trajectories'])} | table v{','.join(map(str, table_versions))}"
        )


def run_step(engine, plan: StepPlan, step: int, baselines: Baselines, config: LiverlConfig,
             reference=None, ranks: Ranks = Ranks()) -> StepResult:
    """The step's result (figures summed over all ranks). reference: the frozen reference policy, needed only
    when trainer.loss.kl_to_reference > 0. ranks: this process's place among the data-parallel ranks."""
    tc = config.trainer
    if tc.loss.kl_to_reference > 0 and reference is None:
        raise ValueError("trainer.loss.kl_to_reference > 0 needs run_step(..., reference=<frozen base policy>); "
                         "load one, or set trainer.loss.kl_to_reference = 0")
    started = time.perf_counter()
    rewards = mixed_rewards(plan.trajectories, step, config.rewards)
    signals = step_signals(plan.trajectories, rewards, baselines, tc.advantages, tc.loss)
    owned = step_samples(plan.trajectories, plan.weights, signals, tc.max_seq_len)  # (trajectory id, sample)
    samples = [sample for _, sample in owned]
    groups = micro_batches(samples, tc.deepspeed)
    per_step = tc.deepspeed.gradient_accumulation_steps * ranks.world
    # Every rank gets the same count of micro-batches, a multiple of its accumulation: a short step is padded with
    # zero-weight fillers. A step may hold more than one accumulation's worth (plans merged while the step waited
    # for its rows, trainer/step/wait.py; a lone trajectory whose segments overflow the budget): it is still ONE
    # optimizer update, on all of them (the boundary set below), never one per accumulation's worth of its rows.
    # No micro-batch at all (every trajectory an unsuccessful import): no optimizer step.
    groups += [[[filler(samples[0])]]] * (-len(groups) % per_step) if samples else []
    mine = deal(len(groups), ranks.world, ranks.rank)
    owner_of = {id(sample): owner for owner, sample in owned}
    trained_ids = sorted({owner_of[id(s)] for i in mine for row in groups[i] for s in row if id(s) in owner_of})
    batches = [collate_rows(rows) for rows in groups]
    own = [batches[i].to(engine.device) for i in mine]
    # The whole step's tokens with a loss term: each rank counts its own micro-batches, then all ranks add up
    # (one decision on scoring them, as ZeRO-3 forwards are collective).
    score = ranks.any(needs_logits(own, tc.loss))
    tokens = max(int(ranks.sum([float(loss_tokens(engine, own, tc.loss, score))])[0]), 1)
    sums = [0.0] * len(SUMMED)  # Σ over this rank's tokens
    for index, batch in enumerate(own):
        engine.set_gradient_accumulation_boundary(index == len(own) - 1)  # before the forward, as DeepSpeed asks
        weights, losses, scored = batch_loss(engine, batch, tc.loss, reference)
        # Token-level mean over the step's tokens that get a loss term (unweighted count, so staleness weights
        # scale the gradient); DeepSpeed divides each micro-batch loss by the accumulation and averages the
        # gradients over the ranks.
        engine.backward(step_objective(losses, weights, tokens) * per_step)
        engine.step()
        sums = [a + b for a, b in zip(sums, micro_batch_sums(batch, weights, losses, scored))]
    summed = dict(zip(SUMMED, ranks.sum(sums)))
    result = step_result(plan, rewards, samples, batches, summed, tokens, time.perf_counter() - started)
    return replace(result, trained_ids=tuple(trained_ids))


def deal(count: int, world: int, rank: int) -> range:
    """The micro-batch indices rank `rank` trains out of `count`: every world-th, starting at its own."""
    return range(rank, count, world)


def loss_tokens(model, batches: list[MicroBatch], config: LossConfig, score: bool | None = None) -> int:
    """How many tokens of these micro-batches get a loss term: loss-masked, minus the unscorable ones when
    config.exclude_unscorable. The step's mean divides by it, so excluded tokens do not shrink the gradient of the
    others. It must be known before the first backward: where a token's flag depends on the logits (truncated
    sampling), the micro-batches are scored once more without gradients. score: whether to (None: when any
    flag needs the logits); ranks pass one decision, as ZeRO-3 forwards gather parameters from all of them."""
    if score is None:
        score = needs_logits(batches, config)
    total = 0
    for batch in batches:
        trained = batch.loss_mask > 0
        if config.exclude_unscorable:
            if score:
                with torch.no_grad():
                    unscorable = score_batch(model, batch, config.scoring_chunk_tokens).unscorable
            else:
                unscorable = unscorable_by_sampling(batch.sampling, trained)
                if batch.context_cut is not None:
                    unscorable = unscorable | batch.context_cut
            trained = trained & ~unscorable
        total += int(trained.sum())
    return total


def needs_logits(batches: list[MicroBatch], config: LossConfig) -> bool:
    """Whether counting the tokens with a loss term needs a forward (trainer/gate/scoring.py unscorable_by_sampling)."""
    return config.exclude_unscorable and any(
        unscorable_by_sampling(batch.sampling, batch.loss_mask > 0) is None for batch in batches)


def step_result(plan: StepPlan, rewards: list[float], samples: list[Sample], batches: list[MicroBatch],
                summed: dict[str, float], tokens: int, elapsed: float) -> StepResult:
    """The step's metrics and progress-line figures (one rank's step, or the sum over all ranks')."""
    real_tokens = sum(len(s.token_ids) for s in samples)
    metrics = {
        **step_figures(summed, tokens),
        "reward": sum(rewards) / len(rewards),
        "imported": float(sum(t.imported for t in plan.trajectories)),
        "tokens_per_s": real_tokens / elapsed,  # all ranks together
        "useful_share": real_tokens / max(sum(batch.computed_tokens for batch in batches), 1),
        "micro_batches": float(len(batches)),  # all ranks', fillers included; one optimizer update whatever it is
        "trajectories": float(len(plan.trajectories)),
        "segments": float(len(samples)),
        "staleness_mean": sum(max(lag, 0) for lag in plan.lags) / max(len(plan.lags), 1),
        "staleness_max": float(max(plan.lags, default=0)),
        "dropped_stale": float(plan.skipped.get("stale", 0)),
        "weight_mean": sum(plan.weights) / len(plan.weights),
    }
    return StepResult(metrics=metrics, staleness=describe(plan.lags), skipped=dict(plan.skipped))


SUMMED = ("loss", "kl", "clip", "excluded", "served", "supervised")  # what micro_batch_sums adds up, in order


def step_samples(trajectories: list[Trajectory], weights: list[float], signals: list[float],
                 max_seq_len: int) -> list[tuple[str, Sample]]:
    """(trajectory id, sample) of each window the step trains, in order. An imported trajectory of SFT weight 0
    (unsuccessful) is left out: it would add nothing but tokens to the mean's denominator."""
    return [(t.trajectory_id, sample)
            for t, weight, signal in zip(trajectories, weights, signals) if not (t.imported and signal == 0.0)
            for sample in trajectory_samples(t, weight, max_seq_len, signal)]


def micro_batch_sums(batch: MicroBatch, weights: torch.Tensor, losses: TokenLoss,
                     scored: ScoredTokens) -> list[float]:
    """One micro-batch's sums, in SUMMED's order: Σ weight·loss; behaviour KL and clipped tokens over the served
    tokens that get a loss term (an imported token has no behaviour logprob to compare with); excluded
    (unscorable) tokens; the served tokens that get a loss term; the supervised (imported) trained tokens."""
    trained, counted = batch.loss_mask > 0, weights > 0
    served = (counted & ~batch.supervised).float()
    return [
        float((losses.loss.detach() * weights).sum()),
        float((behaviour_kl(scored.logp, batch.behaviour_logprobs, served) * served).sum()),
        float((losses.clipped * served).sum()),
        float((trained & ~counted).sum()),
        float(served.sum()),
        float((trained & batch.supervised).sum()),
    ]


def step_figures(sums: dict[str, float], loss_tokens: int) -> dict[str, float]:
    """The step's loss (mean over the tokens that get a loss term), KL and clip fraction (means over the served
    ones: with no import in the step, the same tokens), and the shares of excluded and imported (supervised)
    tokens among all loss-masked ones."""
    served = max(sums["served"], 1.0)
    masked = max(loss_tokens + sums["excluded"], 1.0)
    return {
        "loss": sums["loss"] / loss_tokens,
        "kl": sums["kl"] / served,
        "clip_fraction": sums["clip"] / served,
        "excluded_fraction": sums["excluded"] / masked,
        "imported_fraction": sums["supervised"] / masked,
    }


def filler(sample: Sample) -> Sample:
    """A zero-weight two-token copy: a micro-batch that completes DeepSpeed's accumulation at almost no cost."""
    return replace(sample, token_ids=sample.token_ids[:2], loss_mask=sample.loss_mask[:2],
                   behaviour_logprobs=sample.behaviour_logprobs[:2], weight=0.0, temperature=sample.temperature[:2],
                   top_p=sample.top_p[:2], top_k=sample.top_k[:2])


def batch_loss(model, batch: MicroBatch, config: LossConfig,
               reference=None) -> tuple[torch.Tensor, TokenLoss, ScoredTokens]:
    """(weights, TokenLoss, ScoredTokens) of one micro-batch: tokens scored under their sampling processing;
    weights are loss mask × staleness weight, 0 on unscorable tokens when config.exclude_unscorable."""
    scored = score_batch(model, batch, config.scoring_chunk_tokens)
    weights = batch.loss_mask
    if config.exclude_unscorable:
        weights = torch.where(scored.unscorable, torch.zeros_like(weights), weights)
    reference_logp = None
    if config.kl_to_reference > 0:
        with torch.no_grad():
            reference_logp = score_batch(reference, batch, config.scoring_chunk_tokens).logp
    losses = token_losses(scored.logp, batch.behaviour_logprobs, batch.advantages, config, weights, reference_logp,
                          batch.supervised)
    return weights, losses, scored


def step_objective(losses: TokenLoss, weights: torch.Tensor, loss_tokens: int) -> torch.Tensor:
    """Σ weight·loss / the step's tokens with a loss term (loss_tokens): a token-level mean in which a
    down-weighted token counts fully in the denominator, so its weight really scales its gradient (a weighted
    mean would cancel a common weight)."""
    return (losses.loss * weights).sum() / max(loss_tokens, 1)
