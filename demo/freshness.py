"""Freshness: for each session, the time from its end to the first served version trained on it."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Freshness:
    seconds: dict[str, float]  # session id -> seconds from session end to first serving of a version trained on it
    not_yet: int  # sessions no served version has been trained on yet

    def median(self) -> float:
        return statistics.median(self.seconds.values()) if self.seconds else float("nan")

    def p95(self) -> float:
        values = sorted(self.seconds.values())
        if not values:
            return float("nan")
        return values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]


def first_served_at(sessions: Iterable) -> dict[str, float]:
    """version -> the earliest start (unix s) of a session the product saw it serve."""
    first: dict[str, float] = {}
    for session in sessions:
        for version in session.policy_versions:
            first[version] = min(first.get(version, session.started_at), session.started_at)
    return first


def freshness(sessions: list, trained_sessions: Mapping[str, set[str]], served_at: Mapping[str, float]) -> Freshness:
    """trained_sessions: version -> sessions it (with its ancestors) trained on; served_at: version -> first served."""
    seconds: dict[str, float] = {}
    for session in sessions:
        candidates = [served_at[v] for v, trained in trained_sessions.items()
                      if session.session_id in trained and v in served_at]
        if candidates:
            seconds[session.session_id] = max(0.0, min(candidates) - session.ended_at)
    return Freshness(seconds, not_yet=len(sessions) - len(seconds))
