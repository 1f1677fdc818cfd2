"""A generative judge's verdict on one trajectory, as `label` consumes it (the HTTP side is judge.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Judgement:
    """score is None when unjudged (endpoint down, timeout, too few rubrics parsed): reason says why."""

    score: float | None  # mean of rubric scores, each in [0, 1]
    rubric_scores: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    cached_rubrics: int = 0

    @property
    def judged(self) -> bool:
        return self.score is not None


UNJUDGED = Judgement(score=None, reason="not sent to the judge")
