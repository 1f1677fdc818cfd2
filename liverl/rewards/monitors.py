"""Reward-hacking monitors per policy version, and the drift report the promotion gate reads.

`version_monitors(rows)` aggregates trajectory rows (the table's columns "signals", "reward_components",
"critical_steps", "policy_versions", optionally "task_family") into figures per policy version:

    n                          trajectories
    rate.broken_tool_calls     broken calls / tool calls
    rate.repeated_tool_calls   repeated calls / tool calls
    rate.budget_violations     calls past the hard token cutoff / tool calls
    rate.clarifying            share of trajectories that asked instead of acting
    rate.give_up               share of trajectories that gave up early
    rate.prune_streaks         share of trajectories with a prune streak past the free length
    rate.unjudged              share of judged-eligible trajectories the judge could not score
    rate.custom_failed         share of trajectories on which a rewards.custom function failed (raised, timed out)
    rate.critical_steps_over_budget  share over parl.critical_steps_budget (when one is set)
    mean.edits, mean.turns, mean.tool_calls, mean.critical_steps
    mean.subagents_per_task    instantiated sub-agents per orchestrator trajectory (orchestrator families,
                               or any row that created sub-agents)
    component.<name>           mean of each reward component over the rows that carry it

A row counts for the LAST of its policy_versions (oldest first in the table): the version that finished
the trajectory. Rows without versions count for "unknown".

`drift_report(candidate, champion, config.monitors)` compares two versions' figures and flags moves past the
thresholds; the result is JSON-serialisable (to_dict) so the trainer logs it to MLflow and gates on `ok`.
A monitor is a proxy: its move flags hacking only while the verified outcome (component.outcome) does not rise
with it. When the candidate's outcome is above the champion's, the proxies' moves are notes, not flags (a reward
that asks for parallelism raises sub-agents per task, and that is no hack). These are point figures; the trainer
judges the same moves with standard errors (trainer/step/hacking.py), on its candidate's own outputs (trainer/gate/promotion.py)
and between served versions (trainer/step/rewarding.py).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from liverl.config.rewards import DriftThreshold, MonitorsConfig

UNKNOWN_VERSION = "unknown"
OUTCOME_FIGURE = "component.outcome"  # the verified outcome that a proxy's move is judged with


def _as_dict(value) -> dict[str, float]:
    """Table maps come back from pyarrow as lists of (key, value) pairs; accept both shapes."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): float(v) for k, v in value.items()}
    return {str(k): float(v) for k, v in value}


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _figures(rows: list[dict], orchestrator_families: tuple[str, ...]) -> dict[str, float]:
    signals = [_as_dict(r.get("signals")) for r in rows]
    total = defaultdict(float)
    for s in signals:
        for name, value in s.items():
            total[name] += value
    n = len(rows)
    figures = {
        "n": float(n),
        "rate.broken_tool_calls": _ratio(total["broken_tool_calls"], total["tool_calls"]),
        "rate.repeated_tool_calls": _ratio(total["repeated_tool_calls"], total["tool_calls"]),
        "rate.budget_violations": _ratio(total["budget_violations"], total["tool_calls"]),
        "rate.clarifying": _ratio(total["clarifying"], n),
        "rate.give_up": _ratio(total["gave_up"], n),
        "rate.prune_streaks": _ratio(sum(1 for s in signals if s.get("extra_prune_calls", 0) > 0), n),
        "mean.edits": _ratio(total["edits"], n),
        "mean.turns": _ratio(total["turns"], n),
        "mean.tool_calls": _ratio(total["tool_calls"], n),
        "mean.critical_steps": _ratio(sum(float(r.get("critical_steps") or 0) for r in rows), n),
    }
    over = [s["critical_steps_over_budget"] for s in signals if "critical_steps_over_budget" in s]
    if over:
        figures["rate.critical_steps_over_budget"] = sum(over) / len(over)
    judged = [s["judge.unjudged"] for s in signals if "judge.unjudged" in s]
    if judged:
        figures["rate.unjudged"] = sum(judged) / len(judged)
    custom = [s["custom.failed"] > 0 for s in signals if "custom.failed" in s]
    if custom:
        figures["rate.custom_failed"] = sum(custom) / len(custom)
    orchestrating = [s for r, s in zip(rows, signals)
                     if r.get("task_family") in orchestrator_families or s.get("subagents_created", 0) > 0]
    if orchestrating:
        figures["mean.subagents_per_task"] = sum(s.get("subagents_instantiated", 0) for s in orchestrating) / len(
            orchestrating)
    by_component = defaultdict(list)
    for r in rows:
        for name, value in _as_dict(r.get("reward_components")).items():
            by_component[name].append(value)
    for name, values in sorted(by_component.items()):
        figures[f"component.{name}"] = sum(values) / len(values)
    return figures


def version_monitors(rows: Iterable[Mapping], orchestrator_families: tuple[str, ...] = ("orchestrator",)
                     ) -> dict[str, dict[str, float]]:
    """Policy version -> monitor figures (see the module docstring)."""
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        versions = list(row.get("policy_versions") or [])
        grouped[str(versions[-1]) if versions else UNKNOWN_VERSION].append(dict(row))
    return {version: _figures(group, orchestrator_families) for version, group in sorted(grouped.items())}


@dataclass
class DriftReport:
    """ok is False when any flag was raised. flags: the moves past a threshold; figures: every figure side by
    side; notes: what could not be compared."""

    ok: bool
    flags: list[dict] = field(default_factory=list)
    figures: dict[str, dict[str, float | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def metrics(self, prefix: str = "drift") -> dict[str, float]:
        """Flat figures for mlflow.log_metrics: <prefix>.<figure>.{candidate,champion,delta}, <prefix>.ok, .flags."""
        flat = {f"{prefix}.ok": float(self.ok), f"{prefix}.flags": float(len(self.flags))}
        for name, sides in self.figures.items():
            for side, value in sides.items():
                if value is not None and math.isfinite(value):
                    flat[f"{prefix}.{name}.{side}"] = float(value)
        return flat


def _flag(name: str, cand: float, champ: float, threshold: DriftThreshold) -> dict | None:
    delta = cand - champ
    moves = {"up": delta > 0, "down": delta < 0, "both": delta != 0}[threshold.direction]
    if not moves:
        return None
    size = abs(delta)
    relative = size / abs(champ) if champ else (math.inf if size else 0.0)
    reasons = []
    if threshold.max_abs is not None and size > threshold.max_abs:
        reasons.append(f"|delta| {size:.4g} > {threshold.max_abs:g}")
    if threshold.max_rel is not None and relative > threshold.max_rel:
        reasons.append(f"relative {relative:.4g} > {threshold.max_rel:g}")
    if not reasons:
        return None
    return {"figure": name, "candidate": cand, "champion": champ, "delta": delta,
            "direction": threshold.direction, "reason": "; ".join(reasons)}


def drift_report(candidate: Mapping[str, float], champion: Mapping[str, float] | None,
                 config: MonitorsConfig | Mapping[str, DriftThreshold]) -> DriftReport:
    """Compare a candidate version's figures with the champion's (version_monitors outputs)."""
    if isinstance(config, MonitorsConfig):
        thresholds, min_trajectories = config.thresholds, config.min_trajectories
    else:
        thresholds, min_trajectories = dict(config), 0
    champion = champion or {}
    report = DriftReport(ok=True)
    for name in sorted(set(candidate) | set(champion)):
        cand, champ = candidate.get(name), champion.get(name)
        report.figures[name] = {"candidate": cand, "champion": champ,
                                "delta": None if cand is None or champ is None else cand - champ}
    if candidate.get("n", 0) < min_trajectories:
        report.flags.append({"figure": "n", "candidate": candidate.get("n", 0), "champion": champion.get("n"),
                             "delta": None, "direction": "down",
                             "reason": f"insufficient_data: fewer than {min_trajectories} trajectories"})
    if not champion:
        report.notes.append("no champion figures: nothing to compare (first version?)")
    for name, threshold in sorted(thresholds.items()):
        if name not in candidate or name not in champion:
            if champion and (name in candidate or name in champion):
                report.notes.append(f"{name}: only one side has it, not compared")
            continue
        flag = _flag(name, float(candidate[name]), float(champion[name]), threshold)
        if flag is not None:
            report.flags.append(flag)
    outcome_rise = _outcome_rise(candidate, champion)
    if outcome_rise is not None:
        moved_with = [flag for flag in report.flags if flag["figure"] not in (OUTCOME_FIGURE, "n")]
        report.flags = [flag for flag in report.flags if flag not in moved_with]
        report.notes += [f"{flag['figure']} moved {flag['delta']:+.4g} ({flag['reason']}) with the verified outcome "
                         f"({OUTCOME_FIGURE} {outcome_rise:+.4g}): not hacking, not flagged" for flag in moved_with]
    report.ok = not report.flags
    return report


def _outcome_rise(candidate: Mapping[str, float], champion: Mapping[str, float]) -> float | None:
    """How far the verified outcome rose from champion to candidate; None when it did not rise or is missing."""
    if OUTCOME_FIGURE not in candidate or OUTCOME_FIGURE not in champion:
        return None
    rise = float(candidate[OUTCOME_FIGURE]) - float(champion[OUTCOME_FIGURE])
    return rise if rise > 0 else None
