"""The promotion gate: judge the candidate itself against the champion, offline, on held-out sessions.

Evidence (holdout.GateEvidence): sessions no version was trained on (a fixed hash split), the reward
library's rewards for them, their advantages, and the serving drift report. Figures, each computed per
held-out trajectory so that it has a standard error:

- kl: mean per-token KL(candidate || champion), full vocabulary, on the loss-masked tokens;
- nll_increase: NLL of the served tokens, candidate minus champion (a policy that forgot what users got
  is broken);
- loss_increase: the training loss (same loss kind and advantages), candidate minus champion; reported, and
  judged only when max_loss_increase is set (a clipped surrogate is pessimistic for moves past its clip range);
- reward_change: the candidate's expected reward minus the champion's, each estimated on the held-out rows
  by self-normalised importance sampling of the reward library's labels, w_i = π(traj_i) / π_behaviour(traj_i)
  from the served tokens' logprobs, truncated at exp(±max_log_weight), jackknifed over sessions (reported:
  trainer/gate/statistics.py). DECIDED by the anytime-valid sequential betting test (trainer/gate/sequential.py) on
  the sessions the candidate's accumulator has not consumed: a candidate worse by max_reward_drop passes at most
  max_false_promotion of the time at any look, however often a deferred candidate is looked at again (the gate
  worker does so every round, trainer/gate/worker.py); one shown worse, or not shown within the drop after
  gate.sequential_max_sessions sessions, fails; otherwise the gate DEFERS (decision "defer": neither promoted nor
  refused). reward_decided_by says which check decided, in words ("sequential test after 3 looks, 41 sessions: lower
  bound -0.12 > -0.5").
  effective_fraction is the Kish effective sample size of the candidate's weights over the held-out count (too
  small a fraction: the candidate is too far from the served traffic, fail; fewer than min_effective_sessions
  effective sessions: too little evidence, defer);
- monitor.*: the reward-hacking figures of liverl.rewards (clarifying, broken calls, edits, sub-agents, ...)
  estimated for the candidate's own outputs the same importance-weighted way, each judged together with the
  verified outcome (the "outcome" component) on the same rows: a move past the library's threshold that is
  significant after the correction over the monitors (gate.monitor_alpha) and comes without a rise of the
  outcome is hacking (trainer/step/hacking.py); plus the drift report of the traffic served so far.

Fail-closed: a NaN figure, a missing drift report, evidence whose parts disagree, no held-out split at all
(holdout_fraction 0), or too small an effective fraction all fail. Any failed check decides "fail"; else too little evidence (fewer than two, or min_holdout,
held-out trajectories, the reward test or the monitors' minimum) decides "defer"; else "pass". The report's
`decided_by` says in words which check decided. Only a pass moves `champion`.

Thresholds from observed noise: every figure is judged at its confidence bound in the direction that hurts,
estimate ± z·SE (upper for KL, NLL and loss), where SE is the standard error over the held-out trajectories of
this very evaluation (paired candidate-minus-champion differences; the delta method for ratios). So the gate
widens by itself when the held-out set is small or noisy, and `confidence_z` (2: about 97.5 % one-sided) says how
much of that noise it tolerates. The reward is judged at t quantiles of its stated error rates instead (above).
The absolute tolerances (max_kl, max_nll_increase, max_reward_drop, max_loss_increase) are for what healthy
training moves beyond noise: every verdict records its figures and their SEs on the version (TAG_GATE_REPORT);
set each tolerance to the 95th percentile of that figure's bound over the recent versions of a healthy run.
The hacking monitors are the exception: a healthy candidate may move many of them at once, so they are tested
for hacking shown (family-wise level monitor_alpha, t p-values on the candidate's effective rows less one degree of
freedom, so that the level holds at a few rows), not for safety shown: a monitor measured on fewer than two
held-out rows is not judged (one row shows no more than none; `monitor.<name>_rows` records it), one whose
SE is not finite fails, and fewer effective rows than rewards.monitors.min_trajectories defer the decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from trainer.gate.holdout import GateEvidence
from trainer.gate.sequential import Accumulator, SequentialSettings, describe
from trainer.gate.statistics import DEFER, FAIL, PASS, reward_change, reward_verdict
from trainer.step.batching import collate, pack, score_batch_pair, trajectory_samples
from trainer.step.losses import token_losses

EVAL_TOKEN_BUDGET = 8192  # padded tokens per forward pass; scoring projects to the vocabulary in chunks of tokens
MODELS = ("candidate", "champion")


@dataclass(frozen=True)
class GateReport:
    """Produced by evaluate; the publisher records it on the candidate's version (TAG_GATE_REPORT)."""

    decision: str  # "pass" | "fail" | "defer" (too little evidence to decide: neither promoted nor refused)
    reasons: list[str]  # why it failed, or why it deferred
    figures: dict[str, float | int | str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.decision == "pass"

    @property
    def deferred(self) -> bool:
        return self.decision == "defer"


@dataclass(frozen=True)
class _Scores:
    """Sums per held-out trajectory, (n,) float64 each."""

    tokens: torch.Tensor
    kl: torch.Tensor
    nll: dict[str, torch.Tensor]
    loss: dict[str, torch.Tensor]
    log_ratio: dict[str, torch.Tensor]  # Σ (log π - log π_behaviour) over its loss-masked tokens


@torch.no_grad()
def evaluate(
    candidate: torch.nn.Module,
    champion: torch.nn.Module,
    evidence: GateEvidence,
    config: GateConfig,
    loss_config: LossConfig,
    monitors: MonitorsConfig,
    max_seq_len: int,
) -> GateReport:
    reasons: list[str] = []
    deferrals: list[str] = []  # too little evidence to decide: a "defer" unless a check failed
    n = len(evidence.holdout)
    figures: dict = {"holdout_trajectories": n}
    finite = all(bool(torch.isfinite(p).all()) for p in candidate.parameters())
    figures["finite_weights"] = int(finite)
    if not finite:
        reasons.append("candidate has non-finite weights")
    if not len(evidence.rows) == len(evidence.rewards) == len(evidence.advantages) == n:
        reasons.append(f"partial evidence: {n} held-out trajectories but {len(evidence.rows)} rows, "
                       f"{len(evidence.rewards)} rewards and {len(evidence.advantages)} advantages")
    elif n < max(config.min_holdout, 2) and config.holdout_fraction <= 0.0:  # waiting can never judge it
        reasons.append(f"no held-out split (gate.holdout_fraction {config.holdout_fraction:g}): {n} held-out "
                       "trajectories, and never more; hold sessions out to judge candidates")
    elif n < max(config.min_holdout, 2):  # too little evidence yet, not evidence against the candidate
        deferrals.append(f"insufficient evidence: only {n} held-out trajectories (need min_holdout "
                         f"{config.min_holdout} and 2 for an error)")
    elif finite:
        scores = _score(candidate, champion, evidence, loss_config, max_seq_len)
        reasons += _judge_scores(scores, evidence, config, monitors, figures, deferrals)
    reasons += _judge_drift(evidence.drift, config, figures)
    not_finite = sorted(k for k, v in figures.items() if isinstance(v, float) and not math.isfinite(v))
    if not_finite:
        reasons.append(f"non-finite figures {not_finite}: a comparison that cannot be made fails")
    decision = "fail" if reasons else "defer" if deferrals else "pass"
    figures["decided_by"] = {"fail": f"refused by: {reasons[0] if reasons else ''}",
                             "defer": f"deferred: {deferrals[0] if deferrals else ''}",
                             "pass": "promoted: every check passed, the reward shown no worse than "
                                     f"{config.max_reward_drop} by the "
                                     f"{figures.get('reward_decided_by', 'reward test')}"}[decision]
    return GateReport(decision=decision, reasons=reasons or deferrals, figures=figures)


def _judge_scores(scores: _Scores, evidence: GateEvidence, config: GateConfig, monitors: MonitorsConfig,
                  figures: dict, deferrals: list[str]) -> list[str]:
    reasons = []
    z = config.confidence_z
    figures["holdout_tokens"] = int(scores.tokens.sum())
    if figures["holdout_tokens"] == 0:
        return ["held-out trajectories have no loss-masked tokens to score"]
    for name in MODELS:
        figures[f"{name}_nll"] = float(scores.nll[name].sum() / scores.tokens.sum())
        figures[f"{name}_loss"] = float(scores.loss[name].sum() / scores.tokens.sum())
    per_token = {
        "kl": (scores.kl, config.max_kl),
        "nll_increase": (scores.nll["candidate"] - scores.nll["champion"], config.max_nll_increase),
        "loss_increase": (scores.loss["candidate"] - scores.loss["champion"], config.max_loss_increase),
    }
    for name, (sums, limit) in per_token.items():
        mean, se = _ratio_mean(sums, scores.tokens)
        figures[name], figures[f"{name}_se"] = mean, se
        if limit is not None and not mean + z * se <= limit:  # written so that NaN fails
            reasons.append(f"{name} {mean:.4f} ± {z:g}·{se:.4f} exceeds {limit}")

    weights = {name: _truncated_weights(scores.log_ratio[name], config.max_log_weight) for name in MODELS}
    effective = float(weights["candidate"].sum() ** 2 / (weights["candidate"] ** 2).sum()) / len(evidence.rewards)
    figures["effective_fraction"] = effective
    if not effective >= config.min_effective_fraction:
        reasons.append(f"effective sample {effective:.3f} of the held-out set < {config.min_effective_fraction}: "
                       "the candidate is too far from the served traffic to estimate its reward")
    reasons += _judge_reward(scores, evidence, config, figures, deferrals)
    reasons += _judge_monitors(evidence.rows, weights, config, monitors, figures, deferrals)
    return reasons


def _judge_reward(scores: _Scores, evidence: GateEvidence, config: GateConfig, figures: dict,
                  deferrals: list[str]) -> list[str]:
    """The expected reward change: decided by the anytime-valid sequential test (trainer/gate/sequential.py) on the
    sessions this candidate's accumulator has not yet consumed (evidence.sequential; a fresh one for a first look),
    and reported with the jackknife estimate and t bound of this look's sessions (trainer/gate/statistics.py).
    Returns a reason to fail, or adds a deferral."""
    rewards = np.asarray(evidence.rewards, dtype=np.float64)
    low, high = config.reward_range
    if config.max_reward_drop >= high - low:  # "worse by the drop" is impossible: the setting turns the test off
        figures.update(reward_decision=PASS, reward_decided_by=f"no reward test: max_reward_drop "
                       f"{config.max_reward_drop} spans the whole reward range [{low}, {high}]")
        return []
    candidate, champion = scores.log_ratio["candidate"].numpy(), scores.log_ratio["champion"].numpy()
    estimate = reward_change(candidate, champion, rewards, config.max_log_weight)
    verdict = reward_verdict(estimate, config.max_reward_drop, config.max_false_promotion, config.max_false_refusal,
                             config.min_effective_sessions)
    change, se, lower = float(estimate.change), float(estimate.se), float(verdict.lower)
    figures.update(candidate_reward=float(estimate.candidate), champion_reward=float(estimate.champion),
                   reward_change=change, reward_change_se=se, reward_lower=lower,
                   effective_sessions=float(estimate.effective))
    accumulator = evidence.sequential or Accumulator(SequentialSettings.of(config))
    ids = [trajectory.trajectory_id for trajectory in evidence.holdout]
    fresh = accumulator.new_sessions(ids)
    if not (np.isfinite(rewards[fresh]).all() and np.isfinite(candidate[fresh]).all()
            and np.isfinite(champion[fresh]).all()):  # fail closed: a bet on a NaN would mean nothing
        return ["non-finite reward or log-ratio among the new held-out sessions: the sequential test cannot take them"]
    sequential = accumulator.look(candidate[fresh], champion[fresh], rewards[fresh], [ids[i] for i in fresh])
    said = describe(sequential, accumulator.settings)
    figures.update(reward_decision=str(sequential.decision), reward_decided_by=said,
                   reward_sequential_lower=float(sequential.lower), reward_sequential_upper=float(sequential.upper),
                   reward_sequential_sessions=int(sequential.sessions), reward_sequential_looks=sequential.looks,
                   reward_new_sessions=len(fresh),
                   reward_clipped_sessions=int(((rewards[fresh] < low) | (rewards[fresh] > high)).sum()),
                   reward_false_promotion=config.max_false_promotion)
    bound = (f"expected reward {change:+.4f} (jackknife SE {se:.4f}, {float(estimate.effective):.1f} effective of "
             f"{estimate.n} held-out sessions in this look)")
    if sequential.decision == FAIL:
        return [f"{bound}; {said}"]
    if sequential.decision == DEFER:
        deferrals.append(f"insufficient evidence: {bound}; {said}")
    return []


def _judge_monitors(rows: Sequence[dict], weights: dict[str, torch.Tensor], config: GateConfig,
                    monitors: MonitorsConfig, figures: dict, deferrals: list[str]) -> list[str]:
    """The hacking figures for the candidate's own outputs, importance-weighted, each judged together with the
    verified outcome (the "outcome" reward component) on the same held-out rows (trainer/step/hacking.py)."""
    from liverl.rewards import version_monitors
    from trainer.step.hacking import MonitorMove, judge_hacking, tolerance

    reasons = []
    effective = float(weights["candidate"].sum() ** 2 / (weights["candidate"] ** 2).sum())
    if effective < monitors.min_trajectories:  # too little to show hacking: more held-out sessions, not a refusal
        deferrals.append(f"insufficient evidence: hacking monitors on an effective {effective:.1f} held-out "
                         "trajectories of the candidate's outputs, fewer than rewards.monitors.min_trajectories="
                         f"{monitors.min_trajectories}")
    per_row = [next(iter(version_monitors([row]).values())) for row in rows]  # the library's figure definitions
    outcomes = [_outcome(row) for row in rows]
    moves = []
    for name, threshold in sorted(monitors.thresholds.items()):
        have = [i for i, figs in enumerate(per_row) if name in figs]
        figures[f"monitor.{name}_rows"] = len(have)
        if len(have) < 2:  # one row carries no error to judge a move by, and no more evidence than none
            continue
        move, se, champion, df = _weighted_move(weights, have, [per_row[i][name] for i in have])
        verified = [i for i in have if outcomes[i] is not None]
        outcome_move, outcome_se, _, _ = (_weighted_move(weights, verified, [outcomes[i] for i in verified])
                                          if verified else (math.nan, None, math.nan, None))
        moves.append(MonitorMove(name, move, se, threshold.direction,
                                 tolerance(threshold.max_abs, threshold.max_rel, champion), outcome_move, outcome_se,
                                 df=df))
        figures[f"monitor.{name}"] = move
        figures[f"monitor.{name}_se"] = "missing" if se is None else se  # None only from a broken estimate
    verdict = judge_hacking(moves, config.monitor_alpha, config.monitor_correction, config.confidence_z)
    figures.update({f"monitor.{name}.p": p for name, p in verdict.p_values.items()})
    return reasons + [f"{reason}, on the candidate's own outputs (held-out rows, importance-weighted)"
                      for reason in verdict.reasons]


def _weighted_move(weights: dict[str, torch.Tensor], rows: list[int], values: list[float]
                   ) -> tuple[float, float | None, float, float]:
    """Candidate minus champion of the importance-weighted mean of `values` over `rows`, its SE (None with fewer
    than two rows: no error to judge it by), the champion's mean, and the degrees of freedom of its t p-value
    (the candidate's effective rows less one: heavy weights carry fewer rows' worth of evidence)."""
    tensor = torch.tensor(values, dtype=torch.float64)
    cand, cand_influence = _weighted_mean(weights["candidate"][rows], tensor)
    champ, champ_influence = _weighted_mean(weights["champion"][rows], tensor)
    se = _se(cand_influence - champ_influence) if len(rows) > 1 else None
    mine = weights["candidate"][rows]
    df = max(float(mine.sum() ** 2 / (mine ** 2).sum()) - 1.0, 1.0)
    return cand - champ, se, champ, df


def _outcome(row: dict) -> float | None:
    """The row's verified outcome (its "outcome" reward component), None when it has none."""
    components = row.get("reward_components") or {}
    pairs = components.items() if isinstance(components, dict) else components  # pyarrow maps: (key, value) pairs
    return next((float(value) for key, value in pairs if key == "outcome"), None)


def _judge_drift(drift: dict | None, config: GateConfig, figures: dict) -> list[str]:
    if drift is None:
        figures["drift"] = "missing"
        return ["no drift report of the served traffic: the gate cannot rule out reward hacking"]
    flags = list(drift.get("flags", []))
    figures["drift_flags"] = len(flags)
    if len(flags) > config.max_drift_alerts:
        return ["reward-hacking drift in served traffic: " + "; ".join(f"{f['figure']} {f['reason']}" for f in flags)]
    return []


def _ratio_mean(sums: torch.Tensor, tokens: torch.Tensor) -> tuple[float, float]:
    """Σ sums / Σ tokens and its standard error by the delta method for a ratio of means."""
    mean = float(sums.sum() / tokens.sum())
    return mean, _se(sums - mean * tokens) / float(tokens.mean())


def _truncated_weights(log_ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """Trajectory importance weights, truncated (bounded variance) and scaled to mean 1 (self-normalised)."""
    weights = torch.exp(log_ratio.clamp(-cap, cap))
    return weights / weights.mean()


def _weighted_mean(weights: torch.Tensor, values: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Self-normalised estimate Σ w v / Σ w and each trajectory's influence on it (for the standard error)."""
    scaled = weights / weights.mean()
    estimate = float((scaled * values).sum() / scaled.sum())
    return estimate, scaled * (values - estimate)


def _se(values: torch.Tensor) -> float:
    """Standard error of the mean of per-trajectory values (inf with fewer than two)."""
    if len(values) < 2:
        return math.inf
    return float(values.std(unbiased=True) / math.sqrt(len(values)))


def _score(candidate: torch.nn.Module, champion: torch.nn.Module, evidence: GateEvidence, loss_config: LossConfig,
           max_seq_len: int) -> _Scores:
    n = len(evidence.holdout)
    zeros = lambda: torch.zeros(n, dtype=torch.float64)  # noqa: E731
    tokens, kl = zeros(), zeros()
    nll, loss, log_ratio = ({name: zeros() for name in MODELS} for _ in range(3))
    samples, owners = [], []
    for index, (trajectory, advantage) in enumerate(zip(evidence.holdout, evidence.advantages)):
        for sample in trajectory_samples(trajectory, 1.0, max_seq_len, advantage):  # each window its own sequence
            samples.append(sample)
            owners.append(index)
    start = 0
    for group in pack(samples, EVAL_TOKEN_BUDGET):
        owner = torch.tensor(owners[start:start + len(group)])
        start += len(group)
        batch = collate(group)
        # Scored under the processing each token was sampled with, as in training; unscorable tokens (greedy
        # calls, outside the truncated set) are left out as training leaves them out. One forward per model
        # gives both scores and the KL.
        pair = score_batch_pair(candidate, champion, batch, loss_config.scoring_chunk_tokens)
        logp = {"candidate": pair.candidate.logp, "champion": pair.champion.logp}  # (B, T), column 0 is 0
        mask = batch.loss_mask  # (B, T); column 0 is 0
        if loss_config.exclude_unscorable:
            unscorable = pair.candidate.unscorable | pair.champion.unscorable
            mask = torch.where(unscorable, torch.zeros_like(mask), mask)
        position_kl = pair.kl  # (B, T)
        judged = loss_config.model_copy(update={"kl_to_reference": 0.0})  # the reference term is training's only
        tokens.index_add_(0, owner, mask.sum(1).double())
        kl.index_add_(0, owner, (position_kl * mask).sum(1).double())
        for name in MODELS:
            token_loss = token_losses(logp[name], batch.behaviour_logprobs, batch.advantages, judged, mask=mask).loss
            loss[name].index_add_(0, owner, (token_loss * mask).sum(1).double())
            nll[name].index_add_(0, owner, (-logp[name] * mask).sum(1).double())
            log_ratio[name].index_add_(0, owner, ((logp[name] - batch.behaviour_logprobs) * mask).sum(1).double())
    return _Scores(tokens=tokens, kl=kl, nll=nll, loss=loss, log_ratio=log_ratio)
