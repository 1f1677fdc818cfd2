"""SWE-agent `.traj` files: one file, one session.

A .traj is JSON: `history` (the chat as the model saw it: system prompt, the issue as a user message,
then assistant turns carrying `thought`, `action` and, with function calling, OpenAI `tool_calls`,
each followed by its observation as a `tool` message, or as a `user` message without function
calling), optionally `trajectory` (one step per assistant turn: action, observation, execution_time)
and `info` (exit_status, submission, model_stats). Each assistant turn becomes one model call whose
prompt is the history before it; its action becomes a tool call; each observation a tool result.
The outcome is the run's own result: exit_status "submitted" with a submission is a success (the
agent finished; no test verified it: the detail says so), any other exit status a failure; a file
without `info` has no outcome.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from ingest.importers.chat import tool_calls_of
from ingest.importers.model import (
    OBSERVATION_OF,
    BadInput,
    Exchange,
    ImportedSession,
    SourceOutcome,
    ToolCallSpec,
    digest,
)
from liverl.contracts.chat import content_text

FORMAT = "swe-agent"
TASK_FAMILY = "coding"


def read(path: Path) -> Iterator[ImportedSession | BadInput]:
    raw = path.read_bytes()
    try:
        document = json.loads(raw)
    except ValueError as error:
        yield BadInput(str(path), "invalid_json", f"not a JSON document ({error}); a .traj file is one JSON object")
        return
    history = document.get("history") if isinstance(document, dict) else None
    if not isinstance(history, list) or not all(isinstance(m, dict) for m in history):
        yield BadInput(str(path), "no_history", "no `history` list of messages: is this a SWE-agent .traj file?")
        return
    yield session_of(path, raw, document)


def session_of(path: Path, raw: bytes, document: dict) -> ImportedSession:
    identity = digest(FORMAT, raw)
    history = document["history"]
    messages: list[dict] = []  # the context so far, OpenAI shape
    items: list[Exchange] = []
    pending_action = ""  # the last assistant turn's call id when it acted without function calling
    for position, entry in enumerate(history):
        role = entry.get("role", "user")
        if role == "assistant":
            exchange = _exchange(entry, list(messages), f"{identity}-h{position}", _model_config(document))
            items.append(exchange)
            messages.append(_assistant_message(exchange))
            pending_action = exchange.tool_calls[0].call_id if exchange.calls_in_text and exchange.tool_calls else ""
            continue
        message = {"role": role, "content": content_text(entry.get("content"))}
        if role == "tool":
            ids = entry.get("tool_call_ids") or [entry.get("tool_call_id") or ""]
            message["tool_call_id"] = str(ids[0])
        elif role == "user" and pending_action:
            message[OBSERVATION_OF] = pending_action
        pending_action = ""
        messages.append(message)
    trailing = _trailing(document, history, items, messages)
    info = document.get("info") if isinstance(document.get("info"), dict) else None
    return ImportedSession(
        source=str(path), identity=identity, session_id=f"swe-agent-{path.stem[:80]}-{identity[:12]}",
        task_family=TASK_FAMILY, task_id=_task_id(document, path), start_ms=int(path.stat().st_mtime * 1000),
        items=items, trailing=trailing, outcome=_outcome(info), end_reason=_end_reason(info),
        attributes={"source_format": FORMAT, "source_file": path.name})


def _exchange(entry: dict, context: list[dict], source_id: str, model: dict) -> Exchange:
    calls = tool_calls_of(entry, f"{source_id}-action")
    action = str(entry.get("action") or "").strip()
    in_text = not calls and bool(action)
    if in_text:  # no function calling: the content holds the command line, which the shell tool ran
        calls = [ToolCallSpec(f"{source_id}-action", action.split()[0], json.dumps({"command": action}))]
    sampling = {k: float(model[k]) for k in ("temperature", "top_p") if isinstance(model.get(k), (int, float))}
    return Exchange(source_id=source_id, messages=context, completion=content_text(entry.get("content")),
                    tool_calls=calls, calls_in_text=in_text, model=str(model.get("name") or ""), sampling=sampling)


def _assistant_message(exchange: Exchange) -> dict:
    message: dict = {"role": "assistant", "content": exchange.completion}
    if exchange.tool_calls and not exchange.calls_in_text:
        message["tool_calls"] = [{"id": c.call_id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments_json}}
                                 for c in exchange.tool_calls]
    return message


def _trailing(document: dict, history: list, items: list[Exchange], messages: list[dict]) -> list[dict]:
    """Messages after the last assistant turn, plus the last step's observation when only `trajectory`
    kept it (the history ends with the final action)."""
    last = max((i for i, m in enumerate(history) if m.get("role") == "assistant"), default=-1)
    trailing = messages[last + 1:]  # messages holds one entry per history entry
    steps = document.get("trajectory")
    if last == len(history) - 1 and items and isinstance(steps, list) and steps and isinstance(steps[-1], dict):
        observation = content_text(steps[-1].get("observation"))
        if observation.strip():
            call = items[-1].tool_calls[0].call_id if items[-1].tool_calls else ""
            trailing.append({"role": "tool", "tool_call_id": call, "content": observation})
    return trailing


def _outcome(info: dict | None) -> SourceOutcome | None:
    if not info or not info.get("exit_status"):
        return None
    status = str(info["exit_status"])
    submission = content_text(info.get("submission"))
    success = status == "submitted" and bool(submission.strip())
    detail = (f"SWE-agent exit_status={status} (the agent's own result, not a verified test run); "
              f"submission:\n{submission}")
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    metrics = {f"swe_agent.{k}": float(v) for k, v in stats.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return SourceOutcome(success=success, score=1.0 if success else 0.0, detail=detail, metrics=metrics)


def _end_reason(info: dict | None) -> str:
    if not info or not info.get("exit_status"):
        return "completed"
    return "completed" if info["exit_status"] == "submitted" else "error"


def _task_id(document: dict, path: Path) -> str:
    replay = document.get("replay_config")
    if isinstance(replay, dict):
        agent = replay.get("agent")
        if isinstance(agent, dict) and agent.get("name"):
            return str(agent["name"])
    return path.stem


def _model_config(document: dict) -> dict:
    """replay_config.agent.model (name, temperature, top_p) when the file kept it."""
    replay = document.get("replay_config")
    agent = replay.get("agent") if isinstance(replay, dict) else None
    model = agent.get("model") if isinstance(agent, dict) else None
    return model if isinstance(model, dict) else {}
