"""The evaluator's statistics: intervals of success rates, paired differences, jackknife standard errors."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

Z_95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def t_quantile(df: int, level: float = 0.95) -> float:
    """Student t's two-sided quantile: a mean over a few dozen tasks has a variance that is itself estimated, and
    the normal quantile would make its interval too narrow (2.03 against 1.96 at 35 degrees of freedom)."""
    from scipy.stats import t as student_t

    if df < 1:
        raise ValueError(f"a t quantile needs at least one degree of freedom (got {df})")
    return float(student_t.ppf(0.5 + level / 2, df))


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


def paired_difference(before: list[bool], after: list[bool]) -> dict:
    """Success rate after minus before on the same tasks (same seeds), with a 95 % t interval of the mean
    per-task difference: pairing removes the tasks' own difficulty from the noise, so the interval is far
    narrower than two independent intervals would suggest. n = 1 gives a zero-width interval."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired outcomes need equal, non-empty lists (got {len(before)} and {len(after)})")
    diffs = [int(a) - int(b) for b, a in zip(before, after)]
    n = len(diffs)
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    half = t_quantile(n - 1) * math.sqrt(variance / n) if n > 1 else 0.0
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


def paired_mean_difference(before: Sequence[Sequence[bool]], after: Sequence[Sequence[bool]]) -> dict:
    """Success after minus before on the same tasks, each task played under the same sampling seeds by both
    (before[i][s]: task i under seed s). The task is the unit: its difference is the mean over its seeds, and the
    95 % Student t interval is over tasks (n - 1 degrees of freedom), since one task's plays share its difficulty
    and are not independent. One seed gives paired_difference's figures. "gained" / "lost": tasks whose mean
    rose / fell."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired outcomes need equal, non-empty lists (got {len(before)} and {len(after)})")
    if any(len(b) != len(a) or not b for b, a in zip(before, after)):
        raise ValueError("each task needs the same, non-zero number of seeds on both sides")
    diffs = [statistics.fmean(int(x) for x in a) - statistics.fmean(int(x) for x in b) for b, a in zip(before, after)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    half = t_quantile(n - 1) * math.sqrt(statistics.variance(diffs) / n) if n > 1 else 0.0
    return {"n": n, "seeds": len(before[0]), "difference": mean, "ci95": [mean - half, mean + half],
            "gained": sum(d > 0 for d in diffs), "lost": sum(d < 0 for d in diffs)}


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], resamples: int = 2000,
                    seed: int = 0, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """sum(numerators) / sum(denominators) and its percentile bootstrap interval, resampling the paired units
    (index i carries both numerators[i] and denominators[i]) with replacement."""
    import random

    if len(numerators) != len(denominators) or not numerators:
        raise ValueError(f"a ratio needs equal, non-empty lists (got {len(numerators)} and {len(denominators)})")
    n = len(numerators)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(sum(numerators[i] for i in picks) / sum(denominators[i] for i in picks))
    ratios.sort()
    tail = (1 - level) / 2
    low, high = ratios[int(tail * resamples)], ratios[min(resamples - 1, int((1 - tail) * resamples))]
    return sum(numerators) / sum(denominators), (low, high)
