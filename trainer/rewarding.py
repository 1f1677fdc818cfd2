"""Rewards at training time through the reward library (liverl.rewards), and the drift input of the gate."""

from __future__ import annotations

from collections.abc import Sequence

from liverl.config.rewards import RewardsConfig
from trainer.trajectory import Trajectory


def mixed_rewards(trajectories: list[Trajectory], step: int, config: RewardsConfig) -> list[float]:
    """Raw components mixed with the weights of trainer step `step` (PARL lambdas, Context-1 beta anneal)."""
    from liverl.rewards import mix

    return [
        mix(t.reward_components, t.task_family, step, config, num_policy_tokens=t.trainable_tokens)
        for t in trajectories
    ]


def serving_drift(rows: Sequence[dict], config: RewardsConfig, min_trajectories: int) -> dict:
    """Reward-hacking drift of production traffic: the newest version that served vs the one before it.

    The candidate has served nothing yet, so the gate judges the lineage it grows from: if the latest
    served policy already drifts (more clarifying questions, broken calls, ...) promotion stops.
    """
    from liverl.rewards import drift_report, version_monitors

    figures = {v: f for v, f in version_monitors(rows).items() if v.isdigit()}
    # Small samples swing rates by chance; a flag on noise would block promotion for good.
    served = sorted((v for v, f in figures.items() if f["n"] >= min_trajectories), key=int)
    if len(served) < 2:
        note = f"versions with >= {min_trajectories} trajectories: {served}; nothing to compare yet"
        return {"ok": True, "flags": [], "notes": [note]}
    newest, previous = served[-1], served[-2]
    report = drift_report(figures[newest], figures[previous], config.monitors).to_dict()
    report["compared"] = [newest, previous]
    return report
