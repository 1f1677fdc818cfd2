"""The evaluator's statistics: intervals of success rates, paired differences, jackknife standard errors."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

Z_95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: unlike the normal one it stays in [0, 1] and is not
    degenerate at 0 or n successes, which small held-out families of a weak model often give."""
    if n <= 0:
        raise ValueError(f"no trials (n={n}): a rate needs at least one task")
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(before: list[bool], after: list[bool], z: float = Z_95) -> dict:
    """Success rate after minus before on the same tasks (same seeds), with a 95 % normal interval of the mean
    per-task difference: pairing removes the tasks' own difficulty from the noise, so the interval is far
    narrower than two independent intervals would suggest. n = 1 gives a zero-width interval."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired outcomes need equal, non-empty lists (got {len(before)} and {len(after)})")
    diffs = [int(a) - int(b) for b, a in zip(before, after)]
    n = len(diffs)
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(variance / n)
    return {"n": n, "difference": mean, "ci95": [mean - half, mean + half],
            "gained": sum(d > 0 for d in diffs), "lost": sum(d < 0 for d in diffs)}


def jackknife_se(n: int, statistic: Callable[[list[int]], dict[str, float]]) -> dict[str, float]:
    """Jackknife standard error of each figure of statistic(task indices), leaving out one task at a time."""
    leave_outs = [statistic([j for j in range(n) if j != i]) for i in range(n)]
    se = {}
    for name in sorted(set.intersection(*(set(figures) for figures in leave_outs))):
        values = [figures[name] for figures in leave_outs]
        mean = statistics.fmean(values)
        se[name] = math.sqrt((n - 1) / n * sum((value - mean) ** 2 for value in values))
    return se
