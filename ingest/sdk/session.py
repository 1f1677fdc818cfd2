"""A session recorder: one method per thing that happens outside the model. Each call builds a
SessionEvent (event id, time, per-session sequence number) and hands it to the background sender;
it returns at once and never touches the network.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from enum import IntEnum

from ingest.sdk.completions import request_id_of
from ingest.sdk.ids import random_id
from liverl.contracts import names
from liverl.v1 import common_pb2, session_event_pb2

ROLES = {"single": common_pb2.AGENT_ROLE_SINGLE, "orchestrator": common_pb2.AGENT_ROLE_ORCHESTRATOR,
         "subagent": common_pb2.AGENT_ROLE_SUBAGENT}


class FeedbackKind(IntEnum):
    """What a user's reaction says; values match liverl.v1.FeedbackKind."""

    THUMBS_UP = session_event_pb2.FEEDBACK_KIND_THUMBS_UP
    THUMBS_DOWN = session_event_pb2.FEEDBACK_KIND_THUMBS_DOWN
    EDIT_KEPT = session_event_pb2.FEEDBACK_KIND_EDIT_KEPT
    EDIT_REVERTED = session_event_pb2.FEEDBACK_KIND_EDIT_REVERTED
    DISSATISFIED_FOLLOWUP = session_event_pb2.FEEDBACK_KIND_DISSATISFIED_FOLLOWUP
    RATING = session_event_pb2.FEEDBACK_KIND_RATING


class _Sequence:
    """Per-session counter shared by the session and its sub-agent views (thread-safe: one call of the
    C-implemented itertools.count, atomic under the GIL, so no lock on the caller's path)."""

    def __init__(self) -> None:
        self.next = itertools.count().__next__


def role_value(role: str) -> int:
    if role not in ROLES:
        raise ValueError(f"unknown agent role {role!r}; use one of {sorted(ROLES)}")
    return ROLES[role]


def new_event(session_id: str, user_id: str, agent_id: str, role: int, sequence: int) -> session_event_pb2.SessionEvent:
    return session_event_pb2.SessionEvent(
        event_id=random_id(), session_id=session_id, schema_version=names.EVENT_SCHEMA_VERSION,
        event_time_ms=time.time_ns() // 1_000_000, user_id=user_id, agent_role=role, agent_id=agent_id,
        sequence=sequence)


class SessionRecorder:
    """Records one session (or, from `for_agent`, one sub-agent's part of it)."""

    def __init__(self, submit, session_id: str, user_id: str, agent_id: str = "main", role: str = "single",
                 sequence: _Sequence | None = None):
        self._submit = submit
        self.session_id = session_id
        self.user_id = user_id
        self.agent_id = agent_id
        self.role = role
        self._role = role_value(role)
        self._sequence = sequence or _Sequence()

    def for_agent(self, agent_id: str, role: str = "subagent") -> "SessionRecorder":
        """The same session, with events recorded under a sub-agent's id and role."""
        return SessionRecorder(self._submit, self.session_id, self.user_id, agent_id, role, self._sequence)

    # --- events ------------------------------------------------------------------------------

    def _event(self) -> session_event_pb2.SessionEvent:
        return new_event(self.session_id, self.user_id, self.agent_id, self._role, self._sequence.next())

    def _start(self, task_family: str, task_id: str, token_budget: int, attributes: Mapping[str, str],
               event_id: str = "", time_ms: int = 0) -> None:
        event = self._event()
        event.event_id = event_id or event.event_id
        event.event_time_ms = time_ms or event.event_time_ms
        event.session_start.SetInParent()
        event.session_start.task_family = task_family
        event.session_start.task_id = task_id
        event.session_start.token_budget = token_budget
        event.session_start.attributes.update({str(k): str(v) for k, v in attributes.items()})
        self._submit(event)

    def user_message(self, text: str, follow_up: bool = False) -> None:
        event = self._event()
        event.user_message.text = text
        event.user_message.follow_up = follow_up
        self._submit(event)

    def tool_call(self, name: str, arguments_json: str, request_id: str | object = "", valid: bool = True,
                  error: str = "", call_id: str | None = None) -> str:
        """Record a tool call (broken ones too: valid=False, never discard them); returns its call id.
        request_id: the model call that asked for it: serving's reply itself, or its `id`."""
        call_id = call_id or random_id()
        event = self._event()
        event.tool_call.SetInParent()
        body = event.tool_call
        body.call_id, body.name, body.arguments_json = call_id, name, arguments_json
        body.request_id, body.valid, body.error = request_id_of(request_id), valid, error
        self._submit(event)
        return call_id

    def tool_result(self, call_id: str, output: str, is_error: bool = False, chunk_ids: Iterable[str] = ()) -> None:
        event = self._event()
        event.tool_result.SetInParent()
        event.tool_result.call_id = call_id
        event.tool_result.output = output
        event.tool_result.is_error = is_error
        event.tool_result.chunk_ids.extend(chunk_ids)
        self._submit(event)

    def summary(self, text: str, request_id: str | object = "") -> None:
        """A self-summary; request_id: the model call that wrote it (serving's reply, or its `id`)."""
        event = self._event()
        event.summary.SetInParent()
        event.summary.text = text
        event.summary.request_id = request_id_of(request_id)
        self._submit(event)

    def subagent_created(self, subagent_id: str, name: str) -> None:
        event = self._event()
        event.subagent_created.subagent_id = subagent_id
        event.subagent_created.name = name
        self._submit(event)

    def task_assigned(self, subagent_id: str, task_id: str, description: str, stage: int = 0) -> None:
        event = self._event()
        body = event.task_assigned
        body.subagent_id, body.task_id, body.description, body.stage = subagent_id, task_id, description, stage
        self._submit(event)

    def subagent_finished(self, subagent_id: str, task_id: str, success: bool, steps: int) -> None:
        event = self._event()
        event.subagent_finished.SetInParent()
        body = event.subagent_finished
        body.subagent_id, body.task_id, body.success, body.steps = subagent_id, task_id, success, steps
        self._submit(event)

    def feedback(self, kind: FeedbackKind | int, value: float = 1.0, target_call_id: str = "",
                 comment: str = "") -> None:
        event = self._event()
        fill_feedback(event, kind, value, target_call_id, comment)
        self._submit(event)

    def outcome(self, success: bool, score: float, detail: str = "", gold_chunk_ids: Iterable[str] = (),
                answer_chunk_ids: Iterable[str] = (), metrics: Mapping[str, float] | None = None) -> None:
        event = self._event()
        event.outcome.SetInParent()
        body = event.outcome
        body.success, body.score, body.detail = success, score, detail
        body.gold_chunk_ids.extend(gold_chunk_ids)
        body.answer_chunk_ids.extend(answer_chunk_ids)
        body.metrics.update(metrics or {})
        self._submit(event)

    def end(self, reason: str = "completed") -> None:
        self._end(reason)

    def _end(self, reason: str, event_id: str = "") -> None:
        event = self._event()
        event.event_id = event_id or event.event_id
        event.session_end.reason = reason
        self._submit(event)

    def __enter__(self) -> "SessionRecorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.end("error" if exc_type else "completed")


def fill_feedback(event, kind, value: float, target_call_id: str, comment: str) -> None:
    event.feedback.SetInParent()
    event.feedback.kind = int(kind)
    event.feedback.value = value
    event.feedback.target_call_id = target_call_id
    event.feedback.comment = comment
