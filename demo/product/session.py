"""One product session: the agent loop (policy call, parse, execute), recorded event by event.

The session runner is what a real product would write around liverl: it passes the recorder's
session id and the agent's role/id to the policy so serving's ModelCalls join the session events.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from demo.product.feedback import DelayedFeedback
from demo.product.grammar import parse_tool_call
from demo.product.policy import MAIN_AGENT_ID, ROLE_SUBAGENT, Policy
from demo.product.tasks import OrchestratorTask, OutcomeReport, Task
from demo.product.user import FeedbackItem, SimulatedUser


@dataclass(frozen=True)
class SessionStats:
    """What the demo plots per session. Produced by run_session, consumed by TrafficStats."""

    session_id: str
    family: str
    task_id: str
    served_version: str  # the version that served most of the trained agent's calls (ties: the latest)
    policy_versions: tuple[str, ...]  # every version that served a call, in call order
    reward: float  # the served reward: the product's verifiable outcome score in [0, 1]
    success: bool
    calls: int  # policy calls of the trained agent
    subagent_calls: int
    broken_calls: int
    started_at: float  # unix seconds
    ended_at: float


def run_session(
    task: Task,
    policy: Policy,
    recorder,
    rng,
    *,
    user: SimulatedUser,
    feedback: DelayedFeedback,
    feedback_delay_s: float,
    user_id: str,
    subagents_call_policy: bool = True,
    judge: Callable[[Task, OutcomeReport], OutcomeReport] | None = None,
) -> SessionStats:
    """Run `task` to its end with `policy`, recording through `recorder` (a CaptureClient or look-alike).

    judge: the tenant's view of the outcome (demo/product/preferences.py); what it returns is the recorded Outcome,
    what the user reacts to, and the session's served reward. None: the product's own outcome."""
    started_at = time.time()
    session = recorder.start_session(
        task_family=task.family,
        task_id=task.task_id,
        user_id=user_id,
        token_budget=task.token_budget,
        attributes={"product": "liverl-demo"},
        role=task.agent_role,
    )
    session.user_message(task.request_text(), follow_up=False)
    try:
        versions, call_ids, subagent_calls = _agent_loop(task, policy, session, rng, subagents_call_policy)
    except BaseException:
        session.end("error")  # the session is still closed for the pipelines; the caller counts the error
        raise
    report = task.outcome() if judge is None else judge(task, task.outcome())
    session.outcome(
        success=report.success, score=report.score, detail=report.detail,
        gold_chunk_ids=report.gold_chunk_ids, answer_chunk_ids=report.answer_chunk_ids,
    )
    reaction = user.react(task, report, call_ids, rng)
    if reaction.follow_up:
        session.user_message(reaction.follow_up, follow_up=True)
    session.end("completed")
    ended_at = time.time()
    for item in reaction.feedback:
        feedback.schedule(feedback_delay_s, _sender(recorder, session.session_id, user_id, item))
    return SessionStats(
        session_id=session.session_id,
        family=task.family,
        task_id=task.task_id,
        served_version=_majority_latest(versions),
        policy_versions=tuple(versions),
        reward=report.score,
        success=report.success,
        calls=len(versions),
        subagent_calls=subagent_calls,
        broken_calls=task.broken_calls,
        started_at=started_at,
        ended_at=ended_at,
    )


def _agent_loop(task: Task, policy: Policy, session, rng, subagents_call_policy: bool):
    """Call, parse, execute until the task is done; returns (versions, call ids, sub-agent calls)."""
    versions: list[str] = []
    call_ids: list[str] = []
    subagent_calls = 0
    while not task.is_done:
        prompt = task.prompt()
        completion = policy.generate(prompt, session.session_id, task.agent_role, MAIN_AGENT_ID)
        versions.append(completion.policy_version)
        call = parse_tool_call(completion.text, task.tools)
        call_id = session.tool_call(
            call.name or "unparsed", call.arguments_json(), request_id=completion.request_id,
            valid=call.valid, error=call.error,
        )
        call_ids.append(call_id)
        result = task.step(call)
        session.tool_result(call_id, result.output, is_error=result.is_error, chunk_ids=result.chunk_ids)
        for sub in result.created:
            session.subagent_created(_agent_id(sub), "worker")
        if result.assignments:
            subagent_calls += _run_subagents(task, result.assignments, policy, session, rng, subagents_call_policy)
    return versions, call_ids, subagent_calls


def _run_subagents(task: OrchestratorTask, assignments, policy, session, rng, call_policy: bool) -> int:
    """The frozen sub-agents of one stage: each may call the policy (role subagent), then finishes its part."""
    calls = 0
    for sub, part in assignments:
        agent_id = _agent_id(sub)
        task_id = f"{part}-stage{task.stages}"
        session.task_assigned(agent_id, task_id, f"do {part}", stage=task.calls - 1)  # 0-based orchestrator step
        steps = 0
        if call_policy:
            completion = policy.generate(f"subagent do {part} :", session.session_id, ROLE_SUBAGENT, agent_id)
            call = parse_tool_call(completion.text)
            worker = session.for_agent(agent_id, role=ROLE_SUBAGENT)
            worker.tool_call(call.name or "unparsed", call.arguments_json(), request_id=completion.request_id,
                             valid=call.valid, error=call.error)
            steps, calls = 1, calls + 1
        success, extra_steps = task.finish_part(sub, part, rng)
        session.subagent_finished(agent_id, task_id, success=success, steps=steps + extra_steps)
    return calls


def _agent_id(sub: str) -> str:
    """Grammar id "sub_1" -> agent id "sub-1" (what events and serving metadata carry)."""
    return sub.replace("_", "-")


def _majority_latest(versions: list[str]) -> str:
    if not versions:
        return ""
    counts = Counter(versions)
    best = max(counts.values())
    return next(v for v in reversed(versions) if counts[v] == best)


def feedback_kind(name: str):
    """The SDK's FeedbackKind for `name` ("EDIT_KEPT"): an IntEnum whose values are the protobuf enum's."""
    from ingest.sdk import FeedbackKind

    return FeedbackKind[name]


def _sender(recorder, session_id: str, user_id: str, item: FeedbackItem):
    def send() -> None:
        recorder.feedback(session_id, feedback_kind(item.kind), value=item.value, target_call_id=item.target_call_id,
                          comment=item.comment, user_id=user_id)

    return send
