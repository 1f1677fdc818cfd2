"""One agent's side of a session, extracted once so every component reads plain lists instead of events.

Who owns which event:
- tool calls, tool results and summaries belong to the event's agent_id ("" reads as "main");
- user messages, feedback, the outcome, session start and end belong to the session, hence to its main
  agent (sub-agents are judged by their own tasks: SubAgentFinished);
- sub-agent events (created, task assigned, finished) belong to the orchestrator that spawned them: every
  such event in the session whose subagent_id is not the agent itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from liverl.rewards.session import SessionRecord
from liverl.v1.common_pb2 import AGENT_ROLE_SUBAGENT
from liverl.v1.model_call_pb2 import ModelCall
from liverl.v1.session_event_pb2 import (
    Feedback,
    Outcome,
    SubAgentCreated,
    SubAgentFinished,
    TaskAssigned,
    ToolCall,
    ToolResult,
    UserMessage,
)

MAIN_AGENT_ID = "main"


@dataclass(frozen=True)
class ToolUse:
    call: ToolCall
    result: ToolResult | None  # None: no result recorded (the call broke, or the session ended first)
    time_ms: int


@dataclass(frozen=True)
class TimedFeedback:
    feedback: Feedback
    time_ms: int


@dataclass(frozen=True)
class AgentView:
    agent_id: str
    is_subagent: bool
    task_family: str
    token_budget: int  # SessionStart.token_budget, 0: none
    tool_uses: tuple[ToolUse, ...]  # this agent's, in session order
    model_calls: tuple[ModelCall, ...]  # this agent's, in request order
    summary_request_ids: frozenset[str]  # model calls that wrote a self-summary
    user_messages: tuple[UserMessage, ...]  # main agent only
    feedback: tuple[TimedFeedback, ...]  # main agent only
    outcome: Outcome | None  # main agent only
    end_reason: str  # "" when no SessionEnd
    subagents_created: tuple[SubAgentCreated, ...]  # spawned by this agent
    tasks_assigned: tuple[TaskAssigned, ...]  # by this agent
    subagents_finished: tuple[SubAgentFinished, ...]  # of tasks this agent assigned
    own_tasks_finished: tuple[SubAgentFinished, ...]  # a sub-agent's own finished tasks
    subagent_model_calls: dict[str, int]  # model calls recorded under each other agent id of the session

    @property
    def tool_names(self) -> list[str]:
        return [use.call.name for use in self.tool_uses]

    def turns(self, count_summaries: bool) -> int:
        """Model calls of this agent (one call is one turn), without self-summaries unless asked."""
        if self.model_calls:
            if count_summaries:
                return len(self.model_calls)
            return sum(1 for call in self.model_calls if call.request_id not in self.summary_request_ids)
        # No model calls joined (e.g. recorded elsewhere): distinct requests behind the tool calls.
        return len({use.call.request_id for use in self.tool_uses if use.call.request_id})


def _agent_of(agent_id: str) -> str:
    return agent_id or MAIN_AGENT_ID


def agent_view(session: SessionRecord, agent_id: str) -> AgentView:
    agent_id = _agent_of(agent_id)
    created_ids = {e.subagent_created.subagent_id for e in session.events if e.WhichOneof("body") == "subagent_created"}
    is_subagent = agent_id in created_ids or any(
        _agent_of(c.agent_id) == agent_id and c.agent_role == AGENT_ROLE_SUBAGENT for c in session.model_calls
    ) or any(_agent_of(e.agent_id) == agent_id and e.agent_role == AGENT_ROLE_SUBAGENT for e in session.events)
    is_main = not is_subagent

    calls: list[tuple[ToolCall, int]] = []
    results: dict[str, ToolResult] = {}
    summaries: set[str] = set()
    messages, feedback = [], []
    outcome = None
    end_reason = ""
    task_family, token_budget = "", 0
    created, assigned, finished, own_finished = [], [], [], []
    for event in session.events:
        kind = event.WhichOneof("body")
        mine = _agent_of(event.agent_id) == agent_id
        if kind == "session_start":
            task_family, token_budget = event.session_start.task_family, event.session_start.token_budget
        elif kind == "tool_call" and mine:
            calls.append((event.tool_call, event.event_time_ms))
        elif kind == "tool_result" and mine:
            results.setdefault(event.tool_result.call_id, event.tool_result)
        elif kind == "summary" and mine and event.summary.request_id:
            summaries.add(event.summary.request_id)
        elif kind == "user_message" and is_main:
            messages.append(event.user_message)
        elif kind == "feedback" and is_main:
            feedback.append(TimedFeedback(event.feedback, event.event_time_ms))
        elif kind == "outcome" and is_main:
            outcome = event.outcome  # the last one wins: a re-run of the tests supersedes
        elif kind == "session_end":
            end_reason = event.session_end.reason
        elif kind == "subagent_created" and event.subagent_created.subagent_id != agent_id:
            created.append(event.subagent_created)
        elif kind == "task_assigned" and event.task_assigned.subagent_id != agent_id:
            assigned.append(event.task_assigned)
        elif kind == "subagent_finished":
            body = event.subagent_finished
            (own_finished if body.subagent_id == agent_id else finished).append(body)
    if is_subagent:  # a sub-agent orchestrates nothing (nesting is not modelled)
        created, assigned, finished = [], [], []

    return AgentView(
        agent_id=agent_id,
        is_subagent=is_subagent,
        task_family=task_family,
        token_budget=token_budget,
        tool_uses=tuple(ToolUse(call, results.get(call.call_id), time_ms) for call, time_ms in calls),
        model_calls=tuple(c for c in session.model_calls if _agent_of(c.agent_id) == agent_id),
        summary_request_ids=frozenset(summaries),
        user_messages=tuple(messages),
        feedback=tuple(feedback),
        outcome=outcome,
        end_reason=end_reason,
        subagents_created=tuple(created),
        tasks_assigned=tuple(assigned),
        subagents_finished=tuple(finished),
        own_tasks_finished=tuple(own_finished),
        subagent_model_calls=dict(Counter(_agent_of(c.agent_id) for c in session.model_calls
                                          if _agent_of(c.agent_id) != agent_id)),
    )
