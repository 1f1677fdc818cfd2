"""Advantages for production traffic: per-task-family running baselines, leave-one-out where groups exist.

A prompt is rarely sampled several times in production, so GRPO-style groups are the exception: a
trajectory is compared with the other trajectories of its (task_family, task_id) in the same step
when there are any, and with its family's running mean reward otherwise (a family seen for the first time: the
mean of its other trajectories in the step; never a mean that holds the trajectory's own reward).

Imported trajectories (`liverl import`) get no advantage: their rewards measure the policy that produced the
traces, not ours, so they never move a baseline, join a group or the batch normalisation. `step_signals` gives
them their supervised weight instead (`imported_weight`, the rule trainer/step/losses.py explains).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from liverl.config.trainer import AdvantageConfig, LossConfig
from trainer.step.trajectory import Trajectory

MIN_STD = 1e-6  # below it the advantages are treated as equal


@dataclass
class Baselines:
    """Running mean reward per task family; part of the trainer state, so resume continues it exactly."""

    means: dict[str, float] = field(default_factory=dict)

    def get(self, family: str) -> float | None:
        return self.means.get(family)

    def update(self, rewards_by_family: dict[str, list[float]], momentum: float) -> None:
        for family, rewards in rewards_by_family.items():
            batch_mean = sum(rewards) / len(rewards)
            old = self.means.get(family)
            self.means[family] = batch_mean if old is None else momentum * old + (1 - momentum) * batch_mean


def compute_advantages(
    trajectories: list[Trajectory], rewards: list[float], baselines: Baselines, config: AdvantageConfig
) -> list[float]:
    """One advantage per trajectory; updates `baselines` with this step's rewards afterwards."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    by_family: dict[str, list[float]] = defaultdict(list)
    for index, trajectory in enumerate(trajectories):
        if trajectory.task_id:
            groups[(trajectory.task_family, trajectory.task_id)].append(index)
        by_family[trajectory.task_family].append(rewards[index])
    advantages = []
    for index, trajectory in enumerate(trajectories):
        group = groups.get((trajectory.task_family, trajectory.task_id), []) if trajectory.task_id else []
        if config.leave_one_out and len(group) > 1:
            others = [rewards[j] for j in group if j != index]
            baseline = sum(others) / len(others)
        else:
            running = baselines.get(trajectory.task_family)
            baseline = running if running is not None else _first_seen_baseline(by_family[trajectory.task_family],
                                                                                 rewards[index])
        advantages.append(rewards[index] - baseline)
    if config.normalize == "batch" and advantages:
        advantages = _standardised(advantages)
    baselines.update(by_family, config.baseline_momentum)
    return advantages


def _first_seen_baseline(family_rewards: list[float], own: float) -> float:
    """A family with no running baseline yet: the mean reward of its other trajectories in this step.

    Not the batch mean with the trajectory's own reward in it: that baseline moves with the reward it is subtracted
    from, which shrinks every advantage by 1 - 1/n (a half at n = 2) and biases the gradient; the others' mean is
    independent of it, as the leave-one-out group baseline is. Alone in the step, nothing else measures what its
    family earns: the baseline is its own reward, advantage 0 (it neither pushes nor pulls its tokens), rather than
    a guess such as 0 or another family's mean that would train its tokens on how unrelated tasks score. Its reward
    still starts the family's running baseline (Baselines.update), so the family's next trajectory is judged."""
    n = len(family_rewards)
    return (sum(family_rewards) - own) / (n - 1) if n > 1 else own


def step_signals(
    trajectories: list[Trajectory], rewards: list[float], baselines: Baselines, advantages: AdvantageConfig,
    loss: LossConfig,
) -> list[float]:
    """What each trajectory's tokens are multiplied by in the loss: a served trajectory's advantage (computed
    among the served ones only; updates `baselines`), an imported one's SFT weight w (0: left out of the step)."""
    served = [i for i, t in enumerate(trajectories) if not t.imported]
    served_advantages = compute_advantages([trajectories[i] for i in served], [rewards[i] for i in served],
                                           baselines, advantages)
    signals = [imported_weight(reward, loss) for reward in rewards]
    for index, advantage in zip(served, served_advantages):
        signals[index] = advantage
    return signals


def imported_weight(reward: float, config: LossConfig) -> float:
    """w of an imported trajectory's supervised term -w·log π: import_weight when its mixed reward reaches
    import_min_reward, else 0 (left out of the step)."""
    return config.import_weight if reward >= config.import_min_reward else 0.0


def _standardised(values: list[float]) -> list[float]:
    """(a - mean) / std; a batch whose advantages are all equal carries no signal: all 0 (not a / 1e-6)."""
    mean = sum(values) / len(values)
    centred = [v - mean for v in values]
    std = math.sqrt(sum(c * c for c in centred) / len(values))
    if std < MIN_STD:
        return [0.0] * len(values)
    return [c / std for c in centred]
