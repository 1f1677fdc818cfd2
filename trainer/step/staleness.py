"""How off-policy a trajectory is, and what that does to it: keep, drop or down-weight.

An imported trajectory (`liverl import`) was never served by a policy version ("import"): it has no version lag
(it is trained without a ratio, so no version can make its correction wrong) and is aged by wall time only against
its own limit (`max_import_age_hours`, none by default: backfills are old by nature), and only when its first
call's time is known; an unknown time leaves it fresh."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from liverl.config.trainer import StalenessConfig
from trainer.step.trajectory import Trajectory

UNKNOWN_LAG = -1  # the trajectory names no registry version we can order (e.g. a non-numeric version)


@dataclass(frozen=True)
class Staleness:
    version_lag: int  # trainer's current version minus the oldest version that served the trajectory
    age_hours: float | None  # None: the first-served time is unknown (counted as older than H)
    weight: float  # 1.0 fresh, 0.0 dropped, in between down-weighted


def version_lag(trajectory: Trajectory, current_version: str) -> int:
    try:
        oldest = min(int(version) for version in trajectory.policy_versions)
        return max(int(current_version) - oldest, 0)
    except ValueError:  # no versions, or a version that is not a registry number
        return UNKNOWN_LAG


def assess(trajectory: Trajectory, current_version: str, now_ms: int, config: StalenessConfig) -> Staleness:
    served = trajectory.first_served_ms
    age_hours = None if served is None else max(now_ms - served, 0) / 3_600_000
    if trajectory.imported:
        return _assess_imported(age_hours, config)
    lag = version_lag(trajectory, current_version)
    versions_beyond = max(lag - config.max_version_lag, 0) if lag != UNKNOWN_LAG else None
    # An unknown age cannot be shown to be within H: it is treated as beyond H (dropped, or down-weighted once).
    too_old = age_hours is None or age_hours > config.max_age_hours
    if versions_beyond is None:
        weight = 0.0  # cannot tell how off-policy it is: never train on it
    elif versions_beyond == 0 and not too_old:
        weight = 1.0
    elif config.policy == "drop":
        weight = 0.0
    else:
        weight = config.downweight ** (versions_beyond + int(too_old))
    return Staleness(version_lag=lag, age_hours=age_hours, weight=weight)


def _assess_imported(age_hours: float | None, config: StalenessConfig) -> Staleness:
    limit = config.max_import_age_hours
    if age_hours is None or limit is None or age_hours <= limit:
        weight = 1.0
    else:
        weight = 0.0 if config.policy == "drop" else config.downweight
    return Staleness(version_lag=0, age_hours=age_hours, weight=weight)


def describe(lags: list[int]) -> str:
    """The staleness distribution of a batch, dense: "0:12 1:3 ?:1" (lag: trajectories; ? unknown)."""
    counts = Counter(lags)
    return " ".join(f"{'?' if lag == UNKNOWN_LAG else lag}:{n}" for lag, n in sorted(counts.items())) or "-"
