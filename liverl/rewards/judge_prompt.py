"""What the generative judge reads: one agent's side of a session as text, and its reply parsed to a score.

Model completions are stored as token ids only, so the transcript is what the agent did (its tool calls,
their results, summaries, sub-agent work) and what the user said, which is what the rubrics ask about.
"""

from __future__ import annotations

import re

from liverl.rewards.session import SessionRecord
from liverl.v1.session_event_pb2 import FeedbackKind

SYSTEM_PROMPT = ("You review the work of an AI agent in one session. Read the rubric and the transcript, then "
                 "answer with a single integer from 0 (worst) to 10 (best) on the first line, nothing else.")
_OUTPUT_CHARS = 400
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _line(event, agent_id: str) -> str | None:
    kind = event.WhichOneof("body")
    mine = (event.agent_id or "main") == agent_id
    if kind == "session_start":
        return f"[task] family={event.session_start.task_family} id={event.session_start.task_id}"
    if kind == "user_message":
        prefix = "user (follow-up)" if event.user_message.follow_up else "user"
        return f"[{prefix}] {event.user_message.text}"
    if kind == "tool_call" and mine:
        call = event.tool_call
        broken = "" if call.valid else f" INVALID ({call.error})"
        return f"[tool call {call.call_id}] {call.name}({call.arguments_json}){broken}"
    if kind == "tool_result" and mine:
        result = event.tool_result
        chunks = f" chunks={list(result.chunk_ids)}" if result.chunk_ids else ""
        error = " ERROR" if result.is_error else ""
        return f"[tool result {result.call_id}{error}]{chunks} {result.output[:_OUTPUT_CHARS]}"
    if kind == "summary" and mine:
        return f"[self-summary] {event.summary.text}"
    if kind == "subagent_created":
        return f"[sub-agent created] {event.subagent_created.subagent_id} ({event.subagent_created.name})"
    if kind == "task_assigned":
        task = event.task_assigned
        return f"[task assigned, stage {task.stage}] {task.subagent_id}/{task.task_id}: {task.description}"
    if kind == "subagent_finished":
        done = event.subagent_finished
        return f"[sub-agent finished] {done.subagent_id}/{done.task_id} success={done.success} steps={done.steps}"
    if kind == "feedback":
        return f"[user feedback] {FeedbackKind.Name(event.feedback.kind)} {event.feedback.comment}".rstrip()
    if kind == "outcome":
        return f"[outcome] success={event.outcome.success} {event.outcome.detail}".rstrip()
    if kind == "session_end":
        return f"[end] {event.session_end.reason}"
    return None


def render_transcript(session: SessionRecord, agent_id: str, max_chars: int) -> str:
    """The agent's session as lines; when too long, the start is dropped (the end decides the task)."""
    lines = [line for event in session.events if (line := _line(event, agent_id or "main")) is not None]
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "...\n" + text[-max_chars:]


def user_prompt(rubric: str, transcript: str) -> str:
    return f"Rubric: {rubric}\n\nTranscript:\n{transcript}\n\nScore (0-10):"


def parse_score(reply: str) -> float:
    """The first number of the reply, clamped to [0, 10], as a score in [0, 1]; ValueError if none."""
    match = _NUMBER.search(reply or "")
    if match is None:
        raise ValueError(f"judge reply has no score: {reply[:80]!r}")
    return min(10.0, max(0.0, float(match.group()))) / 10.0
