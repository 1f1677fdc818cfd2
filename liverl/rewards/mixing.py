"""`mix`: the trainer's scalar reward from a row's raw components at its own training step.

    r = PARL(step) + Context1(step) + sum_{other components c} w_family(c) * c

- PARL, when any parl.* component is present: lambda1(step)*r_parallel + lambda2(step)*r_finish + r_perf,
  the lambdas annealed by config.parl.lambda1/lambda2 (the "outcome" component is r_perf then, not
  counted twice).
- Context-1, when search.precision is present:
      r_pre = f_weight*F_beta(step) + traj_weight*r_traj + answer_bonus*r_fa
      r = clamp(r_pre - p_prune - p_turn, min(epsilon, r_pre), r_pre)
  with F_beta over the stored precision and recall and beta from config.context1.beta. The floor epsilon
  keeps a trajectory that retrieved something above one that retrieved nothing (which scores exactly 0:
  the floor never exceeds r_pre); the ceiling r_pre means penalties only ever lower the reward.
  prune_penalty and turn_penalty are consumed here (not weighted again).
- every other component: weight from config.weights_for(task_family) (0 for unlisted ones), so the judge
  is only ever added beside verifiable signals, never in place of one.
- Toggle (config.toggle.enabled): in budgeted blocks of steps, a trajectory over its family's token budget
  keeps its penalties but loses its credit: r -> min(r, 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from liverl.config.rewards import RewardsConfig
from liverl.rewards.schedules import schedule_value

PARL_COMPONENTS = ("parl.r_perf", "parl.r_parallel", "parl.r_finish")
CONTEXT1_COMPONENTS = ("search.precision", "search.recall", "search.traj_recall", "search.answer_found")


def f_beta(precision: float, recall: float, beta: float) -> float:
    b2 = beta * beta
    denominator = b2 * precision + recall
    return (1.0 + b2) * precision * recall / denominator if denominator > 0 else 0.0


def context1_reward(components: Mapping[str, float], step: int, config: RewardsConfig) -> float:
    c1 = config.context1
    beta = schedule_value(c1.beta, step)
    f = f_beta(components.get("search.precision", 0.0), components.get("search.recall", 0.0), beta)
    r_pre = (c1.f_weight * f + c1.traj_weight * components.get("search.traj_recall", 0.0)
             + c1.answer_bonus * components.get("search.answer_found", 0.0))
    penalised = r_pre + components.get("prune_penalty", 0.0) + components.get("turn_penalty", 0.0)
    return min(max(penalised, min(c1.epsilon, r_pre)), r_pre)


def parl_reward(components: Mapping[str, float], step: int, config: RewardsConfig) -> float:
    r_perf = components.get("parl.r_perf", components.get("outcome", 0.0))
    return (schedule_value(config.parl.lambda1, step) * components.get("parl.r_parallel", 0.0)
            + schedule_value(config.parl.lambda2, step) * components.get("parl.r_finish", 0.0) + r_perf)


Components = Mapping[str, float] | Iterable[tuple[str, float]]


def mix_terms(components: Components, task_family: str, step: int, config: RewardsConfig) -> dict[str, float]:
    """The reward's terms by name (what `mix` sums), for logging which part moved."""
    components = dict(components)  # also accepts the (key, value) pairs pyarrow returns for a map column
    bad = {k: v for k, v in components.items() if not math.isfinite(v)}
    if bad:
        raise ValueError(f"reward components must be finite, got {bad}; relabel the rows or drop them")
    terms: dict[str, float] = {}
    consumed: set[str] = set()
    if any(name in components for name in PARL_COMPONENTS):
        terms["parl"] = parl_reward(components, step, config)
        consumed.update(PARL_COMPONENTS + ("outcome",))
    if "search.precision" in components:
        terms["context1"] = context1_reward(components, step, config)
        consumed.update(CONTEXT1_COMPONENTS + ("prune_penalty", "turn_penalty"))
    weights = config.weights_for(task_family)
    for name, value in components.items():
        if name not in consumed and weights.get(name, 0.0) != 0.0:
            terms[name] = weights[name] * value
    return terms


def in_budget_phase(step: int, config: RewardsConfig) -> bool:
    """Toggle alternates free and budgeted blocks of period_steps: [0, m) free, [m, 2m) budgeted, ..."""
    return config.toggle.enabled and (step // max(config.toggle.period_steps, 1)) % 2 == 1


def mix(components: Components, task_family: str, step: int, config: RewardsConfig,
        num_policy_tokens: int | None = None) -> float:
    """The scalar reward of one trajectory at trainer step `step` (see the module docstring)."""
    reward = sum(mix_terms(components, task_family, step, config).values())
    if in_budget_phase(step, config):
        if num_policy_tokens is None:
            raise ValueError("rewards.toggle is enabled: pass num_policy_tokens (the trajectory's loss-mask-1 "
                             "token count) to mix, or disable the toggle")
        budget = config.toggle.budget_tokens.get(task_family, config.toggle.default_budget_tokens)
        if num_policy_tokens > budget:
            reward = min(reward, 0.0)
    return float(reward)
