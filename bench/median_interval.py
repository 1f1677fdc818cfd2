"""A distribution-free confidence interval for the median of a benchmark's per-round ratios.

Rounds on a shared machine swing far more than their medians differ, so a single median says little about a goal:
the interval says whether the rounds show it met (the whole interval above the goal), missed (below) or neither.
The interval is between two order statistics of the rounds, chosen from the binomial(n, 1/2) distribution of how many
rounds fall below the true median (the sign test's interval): it assumes only that rounds are independent draws.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binom


@dataclass(frozen=True)
class MedianInterval:
    median: float
    low: float
    high: float
    coverage: float  # the interval's exact coverage (at least the one asked for when there are rounds enough)
    confidence: float  # the coverage asked for

    def verdict(self, goal: float) -> str:
        """"met", "missed" or "not shown" for a goal the ratio must reach (never decided with too few rounds)."""
        if self.coverage < self.confidence:
            return "not shown (too few rounds for the interval)"
        if self.low >= goal:
            return "met"
        if self.high < goal:
            return "missed"
        return "not shown"

    def line(self, goal: float) -> str:
        return (f"median x{self.median:.3f}, {self.coverage:.0%} interval [{self.low:.3f}, {self.high:.3f}]: goal "
                f">= {goal} {self.verdict(goal)}")


def median_interval(values: list[float], confidence: float = 0.95) -> MedianInterval:
    """The median of values and the narrowest order-statistic interval [x_(k), x_(n+1-k)] covering the true median
    with at least `confidence`; with too few values for that, the whole range and the coverage it has."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no rounds: nothing to take the median of")
    middle = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * binom.cdf(k, n, 0.5) >= confidence:
        k += 1  # x_(k+1) still leaves at most (1 - confidence) / 2 of the probability on each side
    return MedianInterval(middle, ordered[k - 1], ordered[n - k], float(1 - 2 * binom.cdf(k - 1, n, 0.5)), confidence)
