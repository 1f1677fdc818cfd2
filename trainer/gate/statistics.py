"""The gate's reward judgement: the candidate's expected reward change, and a decision with stated error rates.

Estimate. Each model's expected reward on the held-out sessions is the self-normalised importance-sampling
estimate Σ w_i r_i / Σ w_i, w_i = exp(clip(log π(traj_i) - log π_behaviour(traj_i), ±max_log_weight)). The change
(candidate minus champion) is paired over the same sessions. At the few sessions a judgement has (8-32), the plain
estimate is biased toward no change and its delta-method standard error is too small (docs/measurements.md), so
both come from the jackknife over sessions:

    θ_(i) = the change with session i left out,   θ̄ = mean_i θ_(i)
    change = n·θ - (n - 1)·θ̄                        (bias-corrected)
    se     = sqrt((n - 1)/n · Σ_i (θ_(i) - θ̄)²)

and its quantiles are Student's t with df = max(ESS - 1, 1), ESS the Kish effective sample size of the candidate's
weights (Σw)²/Σw²: heavy-tailed weights carry fewer sessions' worth of evidence than they count.

Decision (δ = max_reward_drop, α = max_false_promotion, β = max_false_refusal, t_p the t quantile at p):

    enough   = ESS >= min_effective_sessions                    (an absolute floor: it can fail at any n)
    L, U     = change - t_(1-α)·se,  change + t_(1-α)·se
    P_refuse = F_t(t_(1-α) - δ/se)     the chance that an equal candidate's L falls to -δ or below
    pass     : enough and L > -δ                               (a candidate worse by δ passes at most α of the time)
    fail     : not pass, and U < 0 (shown worse: an equal candidate is refused so at most α of the time), or
               enough and P_refuse <= β (this evidence would pass an equal one with chance >= 1 - β)
    defer    : otherwise: the evidence could not keep both error rates, so no decision; about
               N = max(min_effective_sessions·n/ESS, ((t_(1-α) + t_(1-β))·se·√n / δ)²) sessions would.

Everything is vectorised over leading axes (the simulation test, tests/trainer/test_gate_error_rates.py, drives
these very functions with thousands of simulated evidence sets at once); the gate calls them with one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

PASS, FAIL, DEFER = "pass", "fail", "defer"


@dataclass(frozen=True)
class RewardChange:
    """Candidate minus champion expected reward on the held-out sessions; arrays of the evidence's leading shape."""

    change: np.ndarray  # bias-corrected jackknife estimate
    se: np.ndarray  # jackknife standard error
    effective: np.ndarray  # Kish effective sample size of the candidate's weights (sessions)
    candidate: np.ndarray  # the candidate's and the champion's own estimates (uncorrected), for the report
    champion: np.ndarray
    n: int  # held-out sessions


@dataclass(frozen=True)
class RewardVerdict:
    """The reward judgement; arrays of the evidence's leading shape (0-d for one judgement)."""

    decision: np.ndarray  # PASS | FAIL | DEFER
    lower: np.ndarray  # change - t_(1-α)·se
    upper: np.ndarray  # change + t_(1-α)·se
    false_promotion: np.ndarray  # the chance this rule passes a candidate worse by δ: α; 0 where it cannot decide
    false_refusal: np.ndarray  # the chance it refuses an equal one: P_refuse where <= β, else α (only U < 0
    # refuses then); 0 where it cannot decide
    needed_sessions: np.ndarray  # about how many held-out sessions would keep both error rates


def truncated_weights(log_ratio: np.ndarray, cap: float) -> np.ndarray:
    """Trajectory importance weights, truncated at exp(±cap) (bounded variance) and scaled to mean 1; (..., n)."""
    weights = np.exp(np.clip(log_ratio, -cap, cap))
    return weights / weights.mean(axis=-1, keepdims=True)


def reward_change(candidate_log_ratio: np.ndarray, champion_log_ratio: np.ndarray, rewards: np.ndarray,
                  cap: float) -> RewardChange:
    """The jackknife estimate of the change and its SE (module docstring); inputs (..., n), n >= 2."""
    rewards = np.asarray(rewards, dtype=np.float64)
    n = rewards.shape[-1]
    if n < 2:
        raise ValueError(f"a reward change needs at least 2 held-out sessions for an error, got {n}")
    estimates, left_out = [], []
    for log_ratio in (candidate_log_ratio, champion_log_ratio):
        weights = truncated_weights(np.asarray(log_ratio, dtype=np.float64), cap)
        total, weighted = weights.sum(-1, keepdims=True), (weights * rewards).sum(-1, keepdims=True)
        estimates.append(weighted[..., 0] / total[..., 0])
        left_out.append((weighted - weights * rewards) / (total - weights))  # (..., n) session i left out
    full = estimates[0] - estimates[1]
    loo = left_out[0] - left_out[1]
    mean = loo.mean(-1)
    se = np.sqrt((n - 1) / n * ((loo - mean[..., None]) ** 2).sum(-1))
    weights = truncated_weights(np.asarray(candidate_log_ratio, dtype=np.float64), cap)
    effective = weights.sum(-1) ** 2 / (weights ** 2).sum(-1)
    return RewardChange(change=n * full - (n - 1) * mean, se=se, effective=effective,
                        candidate=estimates[0], champion=estimates[1], n=n)


def reward_verdict(estimate: RewardChange, max_reward_drop: float, max_false_promotion: float,
                   max_false_refusal: float, min_effective_sessions: float) -> RewardVerdict:
    """Pass, fail or defer with the stated error rates (module docstring)."""
    change, se, effective = estimate.change, estimate.se, estimate.effective
    df = np.maximum(effective - 1.0, 1.0)
    t_promote, t_refuse = stats.t.ppf(1.0 - max_false_promotion, df), stats.t.ppf(1.0 - max_false_refusal, df)
    lower, upper = change - t_promote * se, change + t_promote * se
    with np.errstate(divide="ignore", invalid="ignore"):
        separation = np.where(se > 0, max_reward_drop / se, np.inf)
    false_refusal = stats.t.cdf(t_promote - separation, df)
    enough = effective >= min_effective_sessions
    passed = enough & (lower > -max_reward_drop)  # written so that NaN does not pass
    failed = ~passed & ((upper < 0) | (enough & (false_refusal <= max_false_refusal)))
    decision = np.where(passed, PASS, np.where(failed, FAIL, DEFER))
    n = estimate.n
    for_power = ((t_promote + t_refuse) * se * np.sqrt(n) / max_reward_drop) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        for_floor = np.where(effective > 0, min_effective_sessions * n / effective, np.inf)
    needed = np.ceil(np.maximum(np.maximum(for_power, for_floor), n + 1))
    return RewardVerdict(decision=decision, lower=lower, upper=upper,
                         false_promotion=np.where(enough, max_false_promotion, 0.0),
                         false_refusal=np.where(enough, np.where(false_refusal <= max_false_refusal, false_refusal,
                                                                 max_false_promotion),
                                                np.where(failed, max_false_promotion, 0.0)),  # failed by U < 0
                         needed_sessions=needed)
