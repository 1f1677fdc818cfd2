"""Trajectories beyond K versions or H hours are dropped or down-weighted; the distribution is described."""

from __future__ import annotations

from liverl.config.trainer import StalenessConfig
from trainer.step.staleness import UNKNOWN_LAG, assess, describe
from trainer.step.trajectory import Trajectory

HOUR_MS = 3_600_000


def _trajectory(versions, served_ms=1_000 * HOUR_MS) -> Trajectory:
    return Trajectory("t", 0, "coding", "", "single", tuple(versions), (1, 2), (0, 1), (0.0, -1.0),
                      first_served_ms=served_ms)


def test_lag_counts_from_the_oldest_serving_version():
    config = StalenessConfig(max_version_lag=2)
    fresh = assess(_trajectory(["5", "7"]), "7", 1_000 * HOUR_MS, config)
    assert (fresh.version_lag, fresh.weight) == (2, 1.0)
    stale = assess(_trajectory(["4", "7"]), "7", 1_000 * HOUR_MS, config)
    assert (stale.version_lag, stale.weight) == (3, 0.0)


def test_downweight_per_version_beyond_k_and_once_beyond_h():
    config = StalenessConfig(max_version_lag=1, max_age_hours=2, policy="downweight", downweight=0.5)
    now = 1_000 * HOUR_MS
    assert assess(_trajectory(["1"]), "4", now, config).weight == 0.25  # 2 versions beyond K
    assert assess(_trajectory(["4"], now - 3 * HOUR_MS), "4", now, config).weight == 0.5  # beyond H
    assert assess(_trajectory(["2"], now - 3 * HOUR_MS), "4", now, config).weight == 0.25  # both
    assert assess(_trajectory(["4"], now - 1 * HOUR_MS), "4", now, config).weight == 1.0


def test_age_beyond_h_drops_by_default():
    now = 1_000 * HOUR_MS
    old = assess(_trajectory(["3"], now - 25 * HOUR_MS), "3", now, StalenessConfig())
    assert old.weight == 0.0 and old.age_hours == 25.0


def test_unknown_versions_are_never_trained_on():
    result = assess(_trajectory(["not-a-version"]), "3", 0, StalenessConfig(policy="downweight"))
    assert (result.version_lag, result.weight) == (UNKNOWN_LAG, 0.0)
    assert assess(_trajectory([]), "3", 0, StalenessConfig()).weight == 0.0


def test_distribution_is_dense():
    assert describe([0, 0, 1, 3, UNKNOWN_LAG]) == "?:1 0:2 1:1 3:1"
    assert describe([]) == "-"


def test_an_unknown_first_served_time_is_not_age_zero():
    now = 1_000 * HOUR_MS
    unknown = _trajectory(["3"], served_ms=None)
    dropped = assess(unknown, "3", now, StalenessConfig())
    assert dropped.age_hours is None and dropped.weight == 0.0  # cannot be shown within H: beyond H, dropped
    down = assess(unknown, "3", now, StalenessConfig(policy="downweight", downweight=0.5))
    assert down.weight == 0.5  # once beyond H, like a known old one
    assert assess(_trajectory(["3"], served_ms=0), "3", 1 * HOUR_MS, StalenessConfig()).age_hours == 1.0  # 0 is a time
