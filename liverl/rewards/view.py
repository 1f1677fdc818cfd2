"""One agent's side of a session, extracted once so every component reads plain lists instead of events.

Who owns which event:
- tool calls, tool results and summaries belong to the event's agent_id ("" reads as "main");
- user messages, feedback, the outcome, session start and end belong to the session, hence to its main
  agent (sub-agents are judged by their own tasks: SubAgentFinished);
- sub-agent events (created, task assigned, finished) belong to the orchestrator, i.e. the main agent,
  whoever recorded them; a sub-agent only keeps the SubAgentFinished of its own tasks.
An agent is a sub-agent when its model calls or events carry AGENT_ROLE_SUBAGENT, or when it was created
or assigned a task in the session.
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
    """One pass over the events and one over the model calls."""
    agent_id = _agent_of(agent_id)
    own_calls: list[ModelCall] = []
    calls_per_agent: Counter[str] = Counter()
    role_says_subagent = False
    for model_call in session.model_calls:
        caller = _agent_of(model_call.agent_id)
        calls_per_agent[caller] += 1
        if caller == agent_id:
            own_calls.append(model_call)
            role_says_subagent |= model_call.agent_role == AGENT_ROLE_SUBAGENT

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
        role_says_subagent |= mine and event.agent_role == AGENT_ROLE_SUBAGENT
        if kind == "tool_call":
            if mine:
                calls.append((event.tool_call, event.event_time_ms))
        elif kind == "tool_result":
            if mine:
                results.setdefault(event.tool_result.call_id, event.tool_result)
        elif kind == "summary":
            if mine and event.summary.request_id:
                summaries.add(event.summary.request_id)
        elif kind == "session_start":
            task_family, token_budget = event.session_start.task_family, event.session_start.token_budget
        elif kind == "user_message":
            messages.append(event.user_message)
        elif kind == "feedback":
            feedback.append(TimedFeedback(event.feedback, event.event_time_ms))
        elif kind == "outcome":
            outcome = event.outcome  # the last one wins: a re-run of the tests supersedes
        elif kind == "session_end":
            end_reason = event.session_end.reason
        elif kind == "subagent_created":
            created.append(event.subagent_created)
        elif kind == "task_assigned":
            assigned.append(event.task_assigned)
        elif kind == "subagent_finished":
            body = event.subagent_finished
            (own_finished if body.subagent_id == agent_id else finished).append(body)

    is_subagent = role_says_subagent or any(c.subagent_id == agent_id for c in created) or any(
        t.subagent_id == agent_id for t in assigned)
    if is_subagent:  # session-level events belong to the main agent; a sub-agent orchestrates nothing
        messages, feedback, outcome, end_reason = [], [], None, ""
        created, assigned, finished = [], [], []
    calls_per_agent.pop(agent_id, None)

    return AgentView(
        agent_id=agent_id,
        is_subagent=is_subagent,
        task_family=task_family,
        token_budget=token_budget,
        tool_uses=tuple(ToolUse(call, results.get(call.call_id), time_ms) for call, time_ms in calls),
        model_calls=tuple(own_calls),
        summary_request_ids=frozenset(summaries),
        user_messages=tuple(messages),
        feedback=tuple(feedback),
        outcome=outcome,
        end_reason=end_reason,
        subagents_created=tuple(created),
        tasks_assigned=tuple(assigned),
        subagents_finished=tuple(finished),
        own_tasks_finished=tuple(own_finished),
        subagent_model_calls=dict(calls_per_agent),
    )
