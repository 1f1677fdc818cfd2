"""Rewards at training time through the reward library (liverl.rewards), and the drift input of the gate."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from liverl.config.rewards import MonitorsConfig, RewardsConfig
from liverl.config.trainer import GateConfig
from liverl.rewards.monitors import OUTCOME_FIGURE
from trainer.step.hacking import HackingVerdict, MonitorMove, judge_hacking, tolerance
from trainer.step.trajectory import Trajectory


def mixed_rewards(trajectories: list[Trajectory], step: int, config: RewardsConfig) -> list[float]:
    """Raw components mixed with the weights of trainer step `step` (PARL lambdas, Context-1 beta anneal)."""
    from liverl.rewards import mix

    return [
        mix(t.reward_components, t.task_family, step, config, num_policy_tokens=t.trainable_tokens)
        for t in trajectories
    ]


def serving_drift(rows: Sequence[dict], rewards: RewardsConfig, gate: GateConfig) -> dict:
    """Reward-hacking drift of production traffic: the newest version that served vs the one before it.

    The candidate has served nothing yet, so the gate judges the lineage it grows from: if the latest served policy
    already drifts (more clarifying questions, broken calls, ...) promotion stops. The report keeps both versions'
    figures side by side (liverl.rewards.drift_report); its flags are the moves judged as the gate judges the
    candidate's own outputs (trainer/step/hacking.py): shown past the threshold over the two versions' sessions, with the
    verified outcome not shown to rise. Twenty to sixty sessions a version move a rate by 0.05-0.1 by chance, so a
    move judged on its point figures alone refused good versions; those point flags stay in the report as
    `point_flags`.
    """
    from liverl.rewards import drift_report, version_monitors

    figures = {v: f for v, f in version_monitors(rows).items() if v.isdigit()}
    # Small samples swing rates by chance; a flag on noise would block promotion for good.
    served = sorted((v for v, f in figures.items() if f["n"] >= gate.drift_min_trajectories), key=int)
    if len(served) < 2:
        note = f"versions with >= {gate.drift_min_trajectories} trajectories: {served}; nothing to compare yet"
        return {"ok": True, "flags": [], "notes": [note]}
    newest, previous = served[-1], served[-2]
    report = drift_report(figures[newest], figures[previous], rewards.monitors).to_dict()
    report["compared"] = [newest, previous]
    per_row = {newest: [], previous: []}  # each row's figures, by the version that finished it
    for row in rows:
        for version, row_figures in version_monitors([row]).items():
            if version in per_row:
                per_row[version].append(row_figures)
    verdict = _judged_drift(per_row[newest], per_row[previous], rewards.monitors, gate)
    report["point_flags"] = [flag for flag in report["flags"] if flag["figure"] != "n"]
    report["flags"] = [flag for flag in report["flags"] if flag["figure"] == "n"] + [
        {"figure": name, "reason": reason} for name, reason in verdict.flags.items()]
    report["p_values"] = verdict.p_values
    report["ok"] = not report["flags"]
    return report


def _judged_drift(newest: list[dict], previous: list[dict], monitors: MonitorsConfig, gate: GateConfig
                  ) -> HackingVerdict:
    """Each monitor's move between two served versions' sessions (two samples: Welch's standard error and its
    Welch-Satterthwaite degrees of freedom for a t p-value), judged with the verified outcome's move
    (trainer/step/hacking.py)."""
    outcome = _move(newest, previous, OUTCOME_FIGURE)
    moves = []
    for name, threshold in sorted(monitors.thresholds.items()):
        move = _move(newest, previous, name)
        if move is None:  # fewer than two sessions carry it on a side: no error to judge a move by
            continue
        change, se, before, df = move
        outcome_change, outcome_se, _, _ = outcome or (math.nan, None, math.nan, None)
        moves.append(MonitorMove(name, change, se, threshold.direction,
                                 tolerance(threshold.max_abs, threshold.max_rel, before), outcome_change, outcome_se,
                                 df=df))
    return judge_hacking(moves, gate.monitor_alpha, gate.monitor_correction, gate.confidence_z)


def _move(newest: list[dict], previous: list[dict], name: str) -> tuple[float, float, float, float | None] | None:
    """(newest mean - previous mean, its Welch standard error, previous mean, Welch-Satterthwaite degrees of freedom;
    None where both variances are 0) of one per-session figure."""
    after = [figures[name] for figures in newest if name in figures]
    before = [figures[name] for figures in previous if name in figures]
    if len(after) < 2 or len(before) < 2:
        return None
    parts = (statistics.variance(after) / len(after), statistics.variance(before) / len(before))
    se = math.sqrt(sum(parts))
    spread = parts[0] ** 2 / (len(after) - 1) + parts[1] ** 2 / (len(before) - 1)
    df = sum(parts) ** 2 / spread if spread > 0 else None
    return statistics.fmean(after) - statistics.fmean(before), se, statistics.fmean(before), df
