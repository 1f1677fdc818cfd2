"""In-memory stand-ins for what the stack records, for the held-out evaluator and tests.

MemoryRecorder has exactly the methods of ingest.sdk.CaptureClient and keeps the events as plain records;
RecordingPolicy keeps each completion as the ModelCall serving would have recorded; to_session_event turns a
recorded event into the SessionEvent the SDK would have sent. Together they make the SessionRecord the
pipelines would rebuild, which liverl.rewards labels. The demo itself records through the real stack.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from demo.product.policy import MAIN_AGENT_ID, ROLE_SINGLE, Completion

_ROLES = {"single": 1, "orchestrator": 2, "subagent": 3}  # liverl.v1.AgentRole values


@dataclass(frozen=True)
class RecordedEvent:
    session_id: str
    agent_id: str
    agent_role: str
    kind: str  # the SessionEvent body name: "session_start", "tool_call", "feedback", ...
    fields: dict = field(default_factory=dict)


class MemorySession:
    def __init__(self, client: "MemoryRecorder", session_id: str, agent_id: str = "main", role: str = "single") -> None:
        self._client = client
        self.session_id = session_id
        self._agent_id = agent_id
        self._role = role

    def _add(self, kind: str, **fields) -> None:
        self._client._append(RecordedEvent(self.session_id, self._agent_id, self._role, kind, fields))

    def for_agent(self, agent_id: str, role: str = "subagent") -> "MemorySession":
        return MemorySession(self._client, self.session_id, agent_id, role)

    def user_message(self, text: str, follow_up: bool = False) -> None:
        self._add("user_message", text=text, follow_up=follow_up)

    def tool_call(self, name: str, arguments_json: str, request_id: str = "", valid: bool = True, error: str = "",
                  call_id: str | None = None) -> str:
        call_id = call_id or f"call-{next(self._client._ids)}"
        self._add("tool_call", call_id=call_id, name=name, arguments_json=arguments_json, request_id=request_id,
                  valid=valid, error=error)
        return call_id

    def tool_result(self, call_id: str, output: str, is_error: bool = False, chunk_ids=()) -> None:
        self._add("tool_result", call_id=call_id, output=output, is_error=is_error, chunk_ids=tuple(chunk_ids))

    def summary(self, text: str, request_id: str = "") -> None:
        self._add("summary", text=text, request_id=request_id)

    def subagent_created(self, subagent_id: str, name: str) -> None:
        self._add("subagent_created", subagent_id=subagent_id, name=name)

    def task_assigned(self, subagent_id: str, task_id: str, description: str, stage: int = 0) -> None:
        self._add("task_assigned", subagent_id=subagent_id, task_id=task_id, description=description, stage=stage)

    def subagent_finished(self, subagent_id: str, task_id: str, success: bool, steps: int) -> None:
        self._add("subagent_finished", subagent_id=subagent_id, task_id=task_id, success=success, steps=steps)

    def outcome(self, success: bool, score: float, detail: str = "", gold_chunk_ids=(), answer_chunk_ids=()) -> None:
        self._add("outcome", success=success, score=score, detail=detail, gold_chunk_ids=tuple(gold_chunk_ids),
                  answer_chunk_ids=tuple(answer_chunk_ids))

    def end(self, reason: str = "completed") -> None:
        self._add("session_end", reason=reason)


class MemoryRecorder:
    """Thread-safe; `events` keeps every recorded event in the order it was recorded."""

    def __init__(self) -> None:
        self.events: list[RecordedEvent] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def _append(self, event: RecordedEvent) -> None:
        with self._lock:
            self.events.append(event)

    def start_session(self, task_family: str = "", task_id: str = "", user_id: str = "", token_budget: int = 0,
                      attributes: dict | None = None, role: str = "single",
                      session_id: str | None = None) -> MemorySession:
        session = MemorySession(self, session_id or f"sess-{uuid.uuid4().hex[:16]}", "main", role)
        session._add("session_start", task_family=task_family, task_id=task_id, user_id=user_id,
                     token_budget=token_budget, attributes=dict(attributes or {}))
        return session

    def feedback(self, session_id: str, kind, value: float = 1.0, target_call_id: str = "", comment: str = "",
                 user_id: str = "") -> None:
        fields = {"kind": kind, "value": value, "target_call_id": target_call_id, "comment": comment}
        self._append(RecordedEvent(session_id, "main", "single", "feedback", fields))

    def of_session(self, session_id: str) -> list[RecordedEvent]:
        with self._lock:
            return [e for e in self.events if e.session_id == session_id]

    def flush(self, timeout_s: float = 10.0) -> bool:
        return True

    def stats(self) -> dict:
        with self._lock:
            return {"recorded": len(self.events)}

    def close(self) -> None:
        pass


class RecordingPolicy:
    """Wraps a policy and keeps every completion as the ModelCall serving would have recorded."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_calls: dict[str, list] = defaultdict(list)

    def generate(
        self, prompt_text: str, session_id: str, agent_role: str = ROLE_SINGLE, agent_id: str = MAIN_AGENT_ID
    ) -> Completion:
        from liverl.v1 import model_call_pb2

        started = int(time.time() * 1000)
        completion = self.inner.generate(prompt_text, session_id, agent_role, agent_id)
        self.model_calls[session_id].append(model_call_pb2.ModelCall(
            request_id=completion.request_id, session_id=session_id, agent_role=_ROLES[agent_role],
            agent_id=agent_id, policy_version=completion.policy_version,
            prompt_token_ids=completion.prompt_token_ids, completion_token_ids=completion.token_ids,
            completion_logprobs=completion.logprobs, request_time_ms=started, finish_time_ms=int(time.time() * 1000),
        ))
        return completion


def to_session_event(event: RecordedEvent, sequence: int):
    """A RecordedEvent as the SessionEvent the SDK would have sent (field names are the proto's)."""
    from liverl.v1 import session_event_pb2

    fields = dict(event.fields)
    message = session_event_pb2.SessionEvent(
        event_id=f"{event.session_id}-{sequence}", session_id=event.session_id, tenant_id="demo",
        agent_role=_ROLES.get(event.agent_role, 1), agent_id=event.agent_id, sequence=sequence,
        event_time_ms=int(time.time() * 1000), user_id=str(fields.pop("user_id", "")),
    )
    body = getattr(message, event.kind)
    body.SetInParent()
    for name, value in fields.items():
        if isinstance(value, dict):
            getattr(body, name).update({str(k): str(v) for k, v in value.items()})
        elif isinstance(value, (list, tuple)):
            getattr(body, name).extend(value)
        else:
            setattr(body, name, int(value) if name == "kind" else value)
    return message
