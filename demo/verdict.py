"""Did the loop learn? The served reward per hot-swapped version, and a plain verdict with its figures.

The verdict says the served reward rose (or fell) only when the 95 % interval of its trend over versions excludes
zero; otherwise "no trend shown", with the slope, its interval and each version's mean and sessions. A slope's sign
alone says nothing: version means over a few dozen sessions each move by more than a run's trend.

The trend is a weighted least-squares line through the version means (weight: the version's sessions, so the slope
equals the per-session fit's), its standard error taken from how far the means scatter about that line, with a
Student t quantile on versions - 2 degrees of freedom. The version, not the session, is the unit: each version's
sessions share its moment of traffic and task mix, so version means scatter more than sessions-per-version alone
explains, and a per-session fit that counted 180 sessions as 180 independent looks would find "trends" in two
lucky versions.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

Trend = Literal["rose", "fell", "no trend shown"]
LEVEL = 0.95  # two-sided: the interval the words rest on


@dataclass(frozen=True)
class Verdict:
    versions: list[str]  # served versions, in the order they were first served, with enough sessions
    mean_reward: dict[str, float]
    sessions: dict[str, int]
    swaps: int  # hot-swapped versions among `versions` (all but the first)
    slope: float  # weighted least-squares slope of mean reward over version order (per version)
    interval: tuple[float, float] | None  # its 95 % interval; None with fewer than 3 versions (no error to fit)
    df: int  # degrees of freedom of the interval's t quantile: versions - 2
    trend: Trend
    min_swaps: int  # fewer hot-swapped versions than this: no trend is claimed whatever the interval

    @property
    def rose(self) -> bool:
        return self.trend == "rose"

    def headline(self) -> str:
        """One phrase for the demo's closing line: the words and the figures they rest on."""
        words = {"rose": "the served reward rose", "fell": "the served reward fell",
                 "no trend shown": "no trend shown in the served reward"}[self.trend]
        return f"{words} ({self._figures(degrees=False)})"

    def describe(self) -> str:
        """The verdict with every version's mean and sessions (the summary's and the report's line)."""
        per_version = ", ".join(f"v{v}: {self.mean_reward[v]:.3f} (n={self.sessions[v]})" for v in self.versions)
        over = f"over {self.swaps} hot-swapped versions"
        if self.swaps < self.min_swaps:
            over += f" ({self.min_swaps} needed for a trend)"
        words = {"rose": f"served reward rose {over}", "fell": f"served reward fell {over}",
                 "no trend shown": f"no trend shown in the served reward {over}"}[self.trend]
        return f"{words}: {self._figures()} [{per_version}]"

    def _figures(self, degrees: bool = True) -> str:
        if self.interval is None:
            return f"slope {self.slope:+.4f}/version, no interval from {len(self.versions)} versions"
        low, high = self.interval
        where = " includes 0" if low <= 0 <= high else ""
        return (f"slope {self.slope:+.4f}/version, 95 % [{low:+.4f}, {high:+.4f}]{where}"
                + (f" (t, {self.df} df)" if degrees else ""))


def judge_rise(by_version: dict[str, list], min_sessions: int, min_swaps: int = 3) -> Verdict:
    """by_version: version -> its sessions (each with .reward), in first-served order. Versions with fewer than
    min_sessions sessions are left out; "rose"/"fell" needs min_swaps hot-swapped versions and a 95 % interval on
    the slope that excludes zero."""
    versions = [v for v, sessions in by_version.items() if len(sessions) >= min_sessions]
    means = {v: statistics.fmean(s.reward for s in by_version[v]) for v in versions}
    counts = {v: len(by_version[v]) for v in versions}
    slope, interval = weighted_trend([means[v] for v in versions], [counts[v] for v in versions])
    swaps = max(0, len(versions) - 1)
    trend: Trend = "no trend shown"
    if swaps >= min_swaps and interval is not None:
        trend = "rose" if interval[0] > 0 else "fell" if interval[1] < 0 else "no trend shown"
    return Verdict(versions, means, counts, swaps, slope, interval, max(0, len(versions) - 2), trend, min_swaps)


def weighted_trend(means: list[float], weights: list[int]) -> tuple[float, tuple[float, float] | None]:
    """Slope of `means` over their order 0, 1, ... weighted by `weights` (sessions), and its 95 % t interval from
    the weighted scatter of the means about the line (None with fewer than 3 means: no scatter to measure)."""
    from scipy.stats import t as student_t

    if len(means) < 2:
        return 0.0, None
    xs = range(len(means))
    total = sum(weights)
    mean_x = sum(w * x for w, x in zip(weights, xs)) / total
    mean_y = sum(w * y for w, y in zip(weights, means)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x in zip(weights, xs))
    slope = sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(weights, xs, means)) / sxx
    df = len(means) - 2
    if df < 1:
        return slope, None
    # Weighted residual variance: an estimate of the per-session variance that also carries the versions' own
    # scatter, since var(mean_v) = sigma² / n_v is what the weights assume and the residuals measure.
    scale = sum(w * (y - mean_y - slope * (x - mean_x)) ** 2 for w, x, y in zip(weights, xs, means)) / df
    half = float(student_t.ppf(0.5 + LEVEL / 2, df)) * math.sqrt(scale / sxx)
    return slope, (slope - half, slope + half)
