"""What the reward library sees: one session's events and model calls, as the pipelines rebuilt them.

Produced by the pipelines (after dedupe and ordering), consumed by liverl.rewards.label.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from liverl.v1.model_call_pb2 import ModelCall
from liverl.v1.session_event_pb2 import SessionEvent


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    tenant_id: str
    events: tuple[SessionEvent, ...]  # deduplicated, ordered by (event_time_ms, sequence)
    model_calls: tuple[ModelCall, ...]  # deduplicated, ordered by request_time_ms

    def start(self):
        """The SessionStart body, or None when the start event is missing."""
        for event in self.events:
            if event.WhichOneof("body") == "session_start":
                return event.session_start
        return None


@dataclass(frozen=True)
class RewardLabel:
    """Raw, unmixed reward components of one trajectory, plus the monitors' counts."""

    components: dict[str, float]  # e.g. {"outcome": 1.0, "broken_tool_calls": -0.5, ...}
    signals: dict[str, float] = field(default_factory=dict)  # e.g. {"broken_tool_calls": 2, "turns": 7}
    critical_steps: int = 0
    config_version: str = ""
