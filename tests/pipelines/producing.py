"""Test data: SessionEvents and ModelCalls built here and produced exactly as ingest and serving do
(docs/architecture.md, contract 1)."""

from __future__ import annotations

import itertools

from liverl.contracts import names
from liverl.v1.common_pb2 import AgentRole, SamplingParams
from liverl.v1.model_call_pb2 import ModelCall
from liverl.v1.session_event_pb2 import SessionEvent

T0 = 1_790_000_000_000  # 2026-09-21, a fixed clock for every test session
_ids = itertools.count()


def event(session_id: str, t: int, agent_id: str = "main", role=AgentRole.AGENT_ROLE_SINGLE, event_id=None,
          tenant="demo", **body) -> SessionEvent:
    """event("s1", 3, user_message=UserMessage(text="hi")): one SessionEvent at T0 + t seconds."""
    message = SessionEvent(event_id=event_id or f"e{next(_ids)}", session_id=session_id, tenant_id=tenant,
                           schema_version=names.EVENT_SCHEMA_VERSION, event_time_ms=T0 + t * 1000,
                           ingest_time_ms=T0 + t * 1000, agent_id=agent_id, agent_role=role, sequence=t, **body)
    return message


def call(session_id: str, t: int, request_id: str, prompt, completion, logprobs=None, agent_id="main",
         role=AgentRole.AGENT_ROLE_SINGLE, version="1", event_id=None, tenant="demo",
         sampling: SamplingParams | None = None) -> ModelCall:
    """sampling None: as serving records a default request (temperature 1, top_p 1, top_k 0)."""
    return ModelCall(event_id=event_id or f"c{next(_ids)}", request_id=request_id, session_id=session_id,
                     tenant_id=tenant, schema_version=names.EVENT_SCHEMA_VERSION, agent_role=role, agent_id=agent_id,
                     policy_version=version, model_name="liverl-policy", prompt_token_ids=prompt,
                     completion_token_ids=completion,
                     completion_logprobs=[-0.5] * len(completion) if logprobs is None else logprobs,
                     request_time_ms=T0 + t * 1000, first_token_time_ms=T0 + t * 1000 + 10,
                     finish_time_ms=T0 + t * 1000 + 20, finish_reason="stop", api="grpc",
                     sampling=sampling or SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=16))


def produce(config, events=(), calls=(), raw=()) -> None:
    """Send messages to the config's topics; raw: (topic, key bytes, value bytes, headers) sent as is."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**config.kafka.client_kwargs(), enable_idempotence=True, acks="all")
    try:
        for message in events:
            producer.send(config.kafka.session_events_topic, key=message.session_id.encode(),
                          value=message.SerializeToString(), headers=_headers(message, b"session-event"))
        for message in calls:
            producer.send(config.kafka.model_calls_topic, key=message.session_id.encode(),
                          value=message.SerializeToString(), headers=_headers(message, b"model-call"))
        for topic, key, value, headers in raw:
            producer.send(topic, key=key, value=value, headers=list(headers))
        producer.flush(timeout=30)
    finally:
        producer.close()


def _headers(message, kind: bytes):
    return [(names.HEADER_SCHEMA_VERSION, str(message.schema_version).encode()),
            (names.HEADER_TENANT, message.tenant_id.encode()), (names.HEADER_KIND, kind)]


def coding_session(session_id: str, t: int = 0, end: bool = True, outcome_score: float = 1.0):
    """A single-agent session: two chained calls, an edit tool call, then a self-summary that starts a new
    segment, an outcome and (optionally) the end. Returns (events, calls)."""
    from liverl.v1 import session_event_pb2 as se

    events = [
        event(session_id, t, session_start=se.SessionStart(task_family="coding", task_id="t-" + session_id)),
        event(session_id, t + 1, user_message=se.UserMessage(text="fix the bug")),
        event(session_id, t + 3, tool_call=se.ToolCall(call_id="k1", name="edit", arguments_json="{}",
                                                       request_id=f"{session_id}-r1", valid=True)),
        event(session_id, t + 4, tool_result=se.ToolResult(call_id="k1", output="ok")),
        event(session_id, t + 6, summary=se.Summary(text="so far", request_id=f"{session_id}-r3")),
        event(session_id, t + 8, outcome=se.Outcome(success=True, score=outcome_score)),
    ]
    if end:
        events.append(event(session_id, t + 9, session_end=se.SessionEnd(reason="completed")))
    calls = [
        call(session_id, t + 2, f"{session_id}-r1", [1, 2, 3], [4, 5]),
        call(session_id, t + 5, f"{session_id}-r2", [1, 2, 3, 4, 5, 6, 7], [8], version="2"),
        call(session_id, t + 6, f"{session_id}-r3", [9, 9], [10, 11, 12], version="2"),  # summary: new segment
    ]
    return events, calls


def orchestrator_session(session_id: str, t: int = 0):
    """An orchestrator that spawns one frozen sub-agent at stage 1. Returns (events, calls)."""
    from liverl.v1 import session_event_pb2 as se

    orch, sub = AgentRole.AGENT_ROLE_ORCHESTRATOR, AgentRole.AGENT_ROLE_SUBAGENT
    events = [
        event(session_id, t, role=orch, session_start=se.SessionStart(task_family="orchestrator", task_id="o1")),
        event(session_id, t + 1, role=orch, user_message=se.UserMessage(text="research X")),
        event(session_id, t + 2, role=orch, subagent_created=se.SubAgentCreated(subagent_id="sub-1", name="searcher")),
        event(session_id, t + 2, role=orch, task_assigned=se.TaskAssigned(subagent_id="sub-1", task_id="task-1",
                                                                          description="find X", stage=1)),
        event(session_id, t + 4, agent_id="sub-1", role=sub,
              subagent_finished=se.SubAgentFinished(subagent_id="sub-1", task_id="task-1", success=True, steps=1)),
        event(session_id, t + 6, role=orch, outcome=se.Outcome(success=True, score=0.5)),
        event(session_id, t + 7, role=orch, session_end=se.SessionEnd(reason="completed")),
    ]
    calls = [
        call(session_id, t + 1, f"{session_id}-o1", [1, 2], [3], role=orch),
        call(session_id, t + 3, f"{session_id}-s1", [20, 21], [22, 23], role=sub, agent_id="sub-1"),
        call(session_id, t + 5, f"{session_id}-o2", [1, 2, 3, 30], [31], role=orch),
    ]
    return events, calls
