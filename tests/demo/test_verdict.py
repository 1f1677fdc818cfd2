"""The served-reward verdict: "rose" only when the trend's 95 % interval excludes zero, else the figures."""

from __future__ import annotations

from dataclasses import dataclass

from demo.verdict import judge_rise


@dataclass(frozen=True)
class _Session:
    reward: float


def _sessions(mean: float, n: int, spread: float = 0.3) -> list[_Session]:
    """n sessions whose rewards average exactly `mean`, alternating mean ± spread (the odd one out at the mean)."""
    rewards = [mean + spread * (-1) ** i for i in range(n - n % 2)] + [mean] * (n % 2)
    return [_Session(r) for r in rewards]


def _by_version(means: list[float], counts: list[int], spread: float = 0.3) -> dict[str, list[_Session]]:
    return {str(v + 1): _sessions(m, n, spread) for v, (m, n) in enumerate(zip(means, counts))}


# A loaded demo run: 8 hot-swapped versions whose means moved between 0.36 and 0.59 on 11-31 sessions,
# a least-squares slope of about +0.0014 a version, the last mean above the first: it printed "ROSE".
NOISY_MEANS = [0.40, 0.59, 0.36, 0.55, 0.38, 0.52, 0.37, 0.50, 0.49]
NOISY_COUNTS = [11, 18, 24, 14, 20, 27, 16, 22, 31]


def test_a_slope_within_noise_is_no_trend_shown_with_its_figures():
    verdict = judge_rise(_by_version(NOISY_MEANS, NOISY_COUNTS), min_sessions=5)
    assert verdict.swaps == 8 and verdict.slope > 0
    assert not verdict.rose
    low, high = verdict.interval
    assert low < 0 < high
    text = verdict.describe()
    assert "ROSE" not in text and "rose" not in text
    assert text.startswith("no trend shown in the served reward over 8 hot-swapped versions")
    assert f"slope {verdict.slope:+.4f}/version" in text and f"95 % [{low:+.4f}, {high:+.4f}]" in text
    assert "v2: 0.590 (n=18)" in text  # each version's mean and its sessions


def test_a_steady_rise_is_rose_with_its_interval():
    means = [0.30, 0.36, 0.40, 0.47, 0.50, 0.56, 0.61]
    verdict = judge_rise(_by_version(means, [20] * len(means)), min_sessions=5)
    assert verdict.rose and verdict.trend == "rose"
    low, high = verdict.interval
    assert 0 < low < verdict.slope < high
    assert verdict.describe().startswith("served reward rose over 6 hot-swapped versions: slope +0.05")
    assert verdict.headline().startswith("the served reward rose")


def test_a_steady_fall_is_said_too():
    means = [0.61, 0.56, 0.50, 0.47, 0.40, 0.36, 0.30]
    verdict = judge_rise(_by_version(means, [20] * len(means)), min_sessions=5)
    assert not verdict.rose and verdict.trend == "fell" and verdict.interval[1] < 0
    assert verdict.headline().startswith("the served reward fell")


def test_the_version_not_the_session_is_the_unit_of_a_trend():
    """Three versions above the line, three below: with 200 sessions each a session-level fit would call the
    +0.01 slope certain; over 7 versions that jump by 0.1 it is not shown."""
    means = [0.40, 0.52, 0.40, 0.54, 0.42, 0.55, 0.45]
    verdict = judge_rise(_by_version(means, [200] * len(means), spread=0.05), min_sessions=5)
    assert verdict.slope > 0 and not verdict.rose


def test_too_few_versions_is_no_trend_whatever_the_slope():
    verdict = judge_rise(_by_version([0.1, 0.5, 0.9], [20, 20, 20]), min_sessions=5)
    assert verdict.swaps == 2 and not verdict.rose and verdict.trend == "no trend shown"
    assert verdict.describe().startswith(
        "no trend shown in the served reward over 2 hot-swapped versions (3 needed for a trend)")


def test_versions_with_too_few_sessions_are_left_out():
    by_version = _by_version([0.3, 0.9, 0.4, 0.5, 0.6, 0.7], [20, 2, 20, 20, 20, 20])
    verdict = judge_rise(by_version, min_sessions=5)
    assert verdict.versions == ["1", "3", "4", "5", "6"] and verdict.swaps == 4
