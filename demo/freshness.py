"""Freshness: for each session, the time from its end to the first served version trained on it, and where
that time went (end -> committed to the table -> registered as a version -> first served)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# The legs of a session's way to serving, in order; each leg's seconds are medians over sessions.
LEGS = ("distilled", "trained", "served")


@dataclass(frozen=True)
class Freshness:
    seconds: dict[str, float]  # session id -> seconds from session end to first serving of a version trained on it
    not_yet: int  # sessions no served version has been trained on yet
    legs: dict[str, dict[str, float]] = field(default_factory=dict)  # leg -> session id -> seconds (LEGS)

    def median(self) -> float:
        return statistics.median(self.seconds.values()) if self.seconds else float("nan")

    def p95(self) -> float:
        values = sorted(self.seconds.values())
        if not values:
            return float("nan")
        return values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

    def describe(self) -> str:
        """"median 50 s, p95 80 s (12 sessions reached a served version, 3 not yet)", or, when none did, says so
        rather than print a median of nothing."""
        if not self.seconds:
            return f"no session reached a served version trained on it ({self.not_yet} sessions not yet)"
        return (f"median {self.median():.0f} s, p95 {self.p95():.0f} s ({len(self.seconds)} sessions reached a served "
                f"version, {self.not_yet} not yet)")

    def leg_medians(self) -> dict[str, float]:
        """leg -> median seconds, for the legs known for at least one session."""
        return {leg: statistics.median(self.legs[leg].values()) for leg in LEGS if self.legs.get(leg)}

    def describe_legs(self) -> str:
        """"end -> table 21 s, -> registered 30 s, -> served 9 s" (medians; they need not add up to the total's)."""
        names = {"distilled": "end -> table", "trained": "-> registered", "served": "-> served"}
        return ", ".join(f"{names[leg]} {seconds:.0f} s" for leg, seconds in self.leg_medians().items())


def first_served_at(sessions: Iterable) -> dict[str, float]:
    """version -> the earliest start (unix s) of a session the product saw it serve."""
    first: dict[str, float] = {}
    for session in sessions:
        for version in session.policy_versions:
            first[version] = min(first.get(version, session.started_at), session.started_at)
    return first


def freshness(sessions: list, trained_sessions: Mapping[str, set[str]], served_at: Mapping[str, float],
              committed_at: Mapping[str, float] | None = None,
              registered_at: Mapping[str, float] | None = None) -> Freshness:
    """trained_sessions: version -> sessions it (with its ancestors) trained on; served_at: version -> first served.

    committed_at (session id -> unix s its rows were committed) and registered_at (version -> unix s it was
    registered) split each session's time into LEGS; either may be omitted (no legs then)."""
    seconds: dict[str, float] = {}
    legs: dict[str, dict[str, float]] = {leg: {} for leg in LEGS}
    for session in sessions:
        candidates = [(served_at[v], v) for v, trained in trained_sessions.items()
                      if session.session_id in trained and v in served_at]
        if not candidates:
            continue
        served, version = min(candidates)
        seconds[session.session_id] = max(0.0, served - session.ended_at)
        committed = (committed_at or {}).get(session.session_id)
        registered = (registered_at or {}).get(version)
        if committed is not None and registered is not None:
            legs["distilled"][session.session_id] = max(0.0, committed - session.ended_at)
            legs["trained"][session.session_id] = max(0.0, registered - committed)
            legs["served"][session.session_id] = max(0.0, served - registered)
    return Freshness(seconds, not_yet=len(sessions) - len(seconds), legs=legs)
