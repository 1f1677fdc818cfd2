"""Interval estimates for success rates."""

from __future__ import annotations

import math

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
