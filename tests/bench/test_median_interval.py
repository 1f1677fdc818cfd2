"""bench/median_interval.py: the sign test's interval for the median of a bench's round ratios covers the true
median as often as it says, and decides a goal only from an interval with rounds enough."""

from __future__ import annotations

import random

import pytest

from bench.median_interval import median_interval


@pytest.mark.parametrize("rounds", [9, 17, 40])
def test_the_interval_covers_the_true_median_as_often_as_it_claims(rounds):
    rng = random.Random(rounds)
    true_median = 1.0  # lognormal(0, 0.2): skewed like a ratio of two noisy throughputs, median exactly 1
    trials = 4000
    intervals = [median_interval([rng.lognormvariate(0.0, 0.2) for _ in range(rounds)]) for _ in range(trials)]
    covered = sum(i.low <= true_median <= i.high for i in intervals) / trials
    claimed = intervals[0].coverage
    assert claimed >= 0.95
    assert abs(covered - claimed) < 4 * (claimed * (1 - claimed) / trials) ** 0.5 + 1e-3


def test_a_goal_is_decided_only_by_a_whole_interval_with_rounds_enough():
    assert median_interval([0.96, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.04]).verdict(0.95) == "met"
    assert median_interval([0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.91, 0.92, 0.93]).verdict(0.95) == "missed"
    assert median_interval([0.80, 0.85, 0.90, 0.94, 0.96, 0.98, 1.0, 1.05, 1.1]).verdict(0.95) == "not shown"
    assert median_interval([1.2, 1.3, 1.4]).verdict(0.95).startswith("not shown")  # 75 % at best from 3 rounds
    with pytest.raises(ValueError):
        median_interval([])
