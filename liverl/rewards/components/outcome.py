"""The task outcome as one number, shared by the production signals, PARL's r_perf and the give-up rule."""

from __future__ import annotations

from liverl.v1.session_event_pb2 import Outcome


def outcome_score(outcome: Outcome) -> float:
    """Outcome.score in [0, 1] when the product set one, else 1 for success and 0 for failure.

    proto3 has no presence on doubles, so a score of exactly 0 reads as "not set": a successful outcome
    with score 0 counts as 1, a failed one as 0.
    """
    if outcome.score > 0:
        return min(1.0, float(outcome.score))
    return 1.0 if outcome.success else 0.0


def failed(outcome: Outcome | None) -> bool:
    return outcome is not None and outcome_score(outcome) < 0.5
