"""The gate's inputs: recent held-out trajectories of the consumed table, their advantages, the drift report."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from trainer.advantages import compute_advantages
from trainer.rewarding import mixed_rewards, serving_drift
from trainer.trajectory import Trajectory, from_row, is_held_out

if TYPE_CHECKING:
    from trainer.loop import Trainer


def held_out_trajectories(rows: list[dict], fraction: float, limit: int, max_seq_len: int) -> list[Trajectory]:
    kept = []
    for row in rows:
        if not is_held_out(row["trajectory_id"], fraction):
            continue
        try:
            trajectory = from_row(row, -1)
        except (ValueError, KeyError, TypeError):
            continue  # the trainer already reported it when it streamed past
        if trajectory.trainable_within(max_seq_len):
            kept.append(trajectory)
    kept.sort(key=lambda t: (t.first_served_ms, t.trajectory_id))
    return kept[-limit:] if limit else kept


def holdout_inputs(trainer: "Trainer") -> tuple[list[Trajectory], list[float], dict]:
    """Advantages use a copy of the baselines: evaluating must not move what training uses."""
    tc = trainer.tc
    rows = trainer.follower.rows_up_to(trainer.stream.version)
    drift = serving_drift(rows, trainer.config.rewards, tc.gate.drift_min_trajectories)
    holdout = held_out_trajectories(rows, tc.gate.holdout_fraction, tc.gate.max_holdout, tc.max_seq_len)
    if not holdout:
        return [], [], drift
    rewards = mixed_rewards(holdout, trainer.state.step, trainer.config.rewards)
    advantages = compute_advantages(holdout, rewards, copy.deepcopy(trainer.baselines), tc.advantages)
    return holdout, advantages, drift
