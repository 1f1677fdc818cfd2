"""Did the loop learn? The served reward per hot-swapped version, and a plain verdict with its figures."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    versions: list[str]  # served versions, in the order they were first served, with enough sessions
    mean_reward: dict[str, float]
    sessions: dict[str, int]
    swaps: int  # hot-swapped versions among `versions` (all but the first)
    slope: float  # least-squares slope of mean reward over version order
    rose: bool

    def describe(self) -> str:
        figures = ", ".join(f"v{v}: {self.mean_reward[v]:.3f} (n={self.sessions[v]})" for v in self.versions)
        word = "ROSE" if self.rose else "did NOT rise"
        return f"served reward {word} over {self.swaps} hot-swapped versions [{figures}]; slope {self.slope:+.4f}/version"


def judge_rise(by_version: dict[str, list], min_sessions: int, min_swaps: int = 3) -> Verdict:
    """by_version: version -> its sessions (each with .reward), in first-served order."""
    versions = [v for v, sessions in by_version.items() if len(sessions) >= min_sessions]
    means = {v: statistics.fmean(s.reward for s in by_version[v]) for v in versions}
    counts = {v: len(by_version[v]) for v in versions}
    slope = _slope([means[v] for v in versions])
    swaps = max(0, len(versions) - 1)
    rose = swaps >= min_swaps and slope > 0 and means[versions[-1]] > means[versions[0]]
    return Verdict(versions, means, counts, swaps, slope, rose)


def _slope(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    xs = range(len(values))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(values)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values))
    den = sum((x - mean_x) ** 2 for x in xs)
    return num / den
