"""Build SessionRecords by hand: for reward tests, the benchmark, and any stage's tests that need a labelled
session without running the capture path. Events get increasing times and sequence numbers.

    s = SessionBuilder("coding")
    req = s.model_call(completion_tokens=20)
    call = s.tool_call("edit", {"file": "a.py"}, request_id=req)
    s.tool_result(call, "ok"); s.outcome(success=True); s.end()
    record = s.build()
"""

from __future__ import annotations

import itertools
import json

from liverl.contracts.names import EVENT_SCHEMA_VERSION
from liverl.rewards.session import SessionRecord
from liverl.v1 import common_pb2
from liverl.v1 import session_event_pb2 as ev
from liverl.v1.model_call_pb2 import ModelCall

_ROLES = {"single": common_pb2.AGENT_ROLE_SINGLE, "orchestrator": common_pb2.AGENT_ROLE_ORCHESTRATOR,
          "subagent": common_pb2.AGENT_ROLE_SUBAGENT}


class SessionBuilder:
    def __init__(self, task_family: str = "coding", session_id: str = "s-1", tenant_id: str = "t-1",
                 token_budget: int = 0, role: str = "single", start_ms: int = 1_000_000):
        self.session_id, self.tenant_id = session_id, tenant_id
        self.role = role
        self._events: list[ev.SessionEvent] = []
        self._calls: list[ModelCall] = []
        self._clock = start_ms
        self._ids = itertools.count(1)
        self._add("main", session_start=ev.SessionStart(task_family=task_family, task_id="task",
                                                        token_budget=token_budget))

    def _tick(self, ms: int = 10) -> int:
        self._clock += ms
        return self._clock

    def _add(self, agent_id: str, at_ms: int | None = None, **body) -> ev.SessionEvent:
        n = next(self._ids)
        role = "subagent" if agent_id != "main" else self.role
        event = ev.SessionEvent(
            event_id=f"{self.session_id}-e{n}", session_id=self.session_id, tenant_id=self.tenant_id,
            schema_version=EVENT_SCHEMA_VERSION, event_time_ms=at_ms if at_ms is not None else self._tick(),
            agent_role=_ROLES[role], agent_id=agent_id, sequence=n, **body)
        self._events.append(event)
        return event

    def model_call(self, prompt_tokens: int = 10, completion_tokens: int = 5, latency_ms: int = 500,
                   agent_id: str = "main", policy_version: str = "1") -> str:
        request_id = f"req-{next(self._ids)}"
        start = self._tick()
        role = "subagent" if agent_id != "main" else self.role
        self._calls.append(ModelCall(
            event_id=f"{self.session_id}-{request_id}", request_id=request_id, session_id=self.session_id,
            tenant_id=self.tenant_id, schema_version=EVENT_SCHEMA_VERSION, agent_role=_ROLES[role], agent_id=agent_id,
            policy_version=policy_version, prompt_token_ids=[1] * prompt_tokens,
            completion_token_ids=[2] * completion_tokens, completion_logprobs=[-0.5] * completion_tokens,
            request_time_ms=start, first_token_time_ms=start + 1, finish_time_ms=start + latency_ms,
            finish_reason="stop"))
        return request_id

    def user_message(self, text: str, follow_up: bool = False) -> None:
        self._add("main", user_message=ev.UserMessage(text=text, follow_up=follow_up))

    def tool_call(self, name: str, arguments: dict | str | None = None, request_id: str = "", valid: bool = True,
                  error: str = "", agent_id: str = "main") -> str:
        call_id = f"call-{next(self._ids)}"
        arguments_json = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        self._add(agent_id, tool_call=ev.ToolCall(call_id=call_id, name=name, arguments_json=arguments_json,
                                                  request_id=request_id, valid=valid, error=error))
        return call_id

    def tool_result(self, call_id: str, output: str = "ok", is_error: bool = False, chunk_ids=(),
                    agent_id: str = "main") -> None:
        self._add(agent_id, tool_result=ev.ToolResult(call_id=call_id, output=output, is_error=is_error,
                                                      chunk_ids=list(chunk_ids)))

    def act(self, name: str, arguments: dict | None = None, chunk_ids=(), valid: bool = True,
            agent_id: str = "main", prompt_tokens: int = 10) -> str:
        """One turn: a model call, the tool call it produced, and the tool's result."""
        request_id = self.model_call(agent_id=agent_id, prompt_tokens=prompt_tokens)
        call_id = self.tool_call(name, arguments, request_id=request_id, valid=valid, agent_id=agent_id,
                                 error="" if valid else "schema violation")
        if valid:
            self.tool_result(call_id, chunk_ids=chunk_ids, agent_id=agent_id)
        return call_id

    def feedback(self, kind: int, value: float = 1.0, target_call_id: str = "", after_ms: int = 10) -> None:
        self._add("main", at_ms=self._tick(after_ms),
                  feedback=ev.Feedback(kind=kind, value=value, target_call_id=target_call_id))

    def outcome(self, success: bool, score: float = 0.0, gold_chunk_ids=(), answer_chunk_ids=()) -> None:
        self._add("main", outcome=ev.Outcome(success=success, score=score, gold_chunk_ids=list(gold_chunk_ids),
                                             answer_chunk_ids=list(answer_chunk_ids)))

    def summary(self, text: str = "summary", agent_id: str = "main") -> str:
        request_id = self.model_call(agent_id=agent_id)
        self._add(agent_id, summary=ev.Summary(text=text, request_id=request_id))
        return request_id

    def subagent_created(self, subagent_id: str, name: str = "worker") -> None:
        self._add("main", subagent_created=ev.SubAgentCreated(subagent_id=subagent_id, name=name))

    def task_assigned(self, subagent_id: str, task_id: str, stage: int, description: str = "") -> None:
        self._add("main", task_assigned=ev.TaskAssigned(subagent_id=subagent_id, task_id=task_id,
                                                        description=description, stage=stage))

    def subagent_finished(self, subagent_id: str, task_id: str, success: bool, steps: int) -> None:
        self._add("main", subagent_finished=ev.SubAgentFinished(subagent_id=subagent_id, task_id=task_id,
                                                                success=success, steps=steps))

    def end(self, reason: str = "completed") -> None:
        self._add("main", session_end=ev.SessionEnd(reason=reason))

    def build(self) -> SessionRecord:
        return SessionRecord(session_id=self.session_id, tenant_id=self.tenant_id, events=tuple(self._events),
                             model_calls=tuple(self._calls))
