"""OpenAI chat-completion logs: JSONL, one logged call per line.

Each line is {"request": {...chat.completions request...}, "response": {...chat.completion...}}, or
the flat variant with the request's fields and the response's `choices` at the top level. A line
names its session with "session_id" (top level, or in the request's or the line's "metadata"), and its end
user with the request's `user` (OpenAI's end-user id) or metadata "user_id";
lines of one session become one session in file order, each line one model call. A line without a
session id is a session of its own. Only the first choice is imported (n > 1 samples are not the
answer the product used). Metadata "task_family" / "task_id" fill the session start.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ingest.importers.chat import tool_calls_of
from ingest.importers.model import BadInput, Exchange, ImportedSession, digest
from liverl.contracts.chat import content_text

FORMAT = "openai-chat"
TASK_FAMILY = "chat"
SAMPLING_FIELDS = {"temperature": float, "top_p": float, "top_k": int, "max_tokens": int, "seed": int}


def read(path: Path) -> Iterator[ImportedSession | BadInput]:
    sessions: dict[str, ImportedSession] = {}
    file_time_ms = int(path.stat().st_mtime * 1000)  # for lines without a "created" time
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            place = f"{path}:{number}"
            try:
                line = json.loads(raw)
            except ValueError as error:
                yield BadInput(place, "invalid_json", f"not a JSON object ({error}); each line must be one logged call")
                continue
            try:
                exchange, named, metadata = _exchange(line, digest(FORMAT, raw))
            except ValueError as error:
                yield BadInput(place, "not_a_chat_completion", str(error))
                continue
            session_id = named or f"openai-{exchange.source_id[:24]}"
            session = sessions.get(session_id)
            if session is None:
                identity = digest(FORMAT, "session", named) if named else exchange.source_id
                session = sessions[session_id] = ImportedSession(
                    source=place, identity=identity, session_id=session_id,
                    task_family=str(metadata.get("task_family") or TASK_FAMILY),
                    task_id=str(metadata.get("task_id") or ""), start_ms=exchange.time_ms or file_time_ms,
                    attributes={"source_format": FORMAT, "source_file": path.name})
            session.user_id = session.user_id or _user(line, metadata)
            session.items.append(exchange)
    yield from sessions.values()


def _exchange(line: object, source_id: str) -> tuple[Exchange, str, dict]:
    """The line's model call, its session id ("" when none) and its metadata; ValueError says what is missing."""
    if not isinstance(line, dict):
        raise ValueError(f"a line must be a JSON object, got {type(line).__name__}")
    request = line.get("request", line)
    response = line.get("response", line)
    if not isinstance(request, dict) or not isinstance(response, dict):
        raise ValueError('"request" and "response" must be objects')
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError('no request "messages" list of message objects: is this a chat.completions log?')
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise ValueError('no response "choices[0].message": log the chat.completion response with the request')
    choice = choices[0]
    answer = choice["message"]
    created = response.get("created")
    time_ms = int(created * 1000) if isinstance(created, (int, float)) and created > 0 else 0
    metadata = {**_dict(line.get("metadata")), **_dict(request.get("metadata"))}
    named = str(line.get("session_id") or metadata.get("session_id") or "")
    sampling = {name: kind(request[name]) for name, kind in SAMPLING_FIELDS.items()
                if isinstance(request.get(name), (int, float)) and not isinstance(request.get(name), bool)}
    if isinstance(request.get("max_completion_tokens"), int):
        sampling["max_tokens"] = request["max_completion_tokens"]
    stop = request.get("stop")
    if stop:
        sampling["stop"] = [stop] if isinstance(stop, str) else [str(s) for s in stop]
    tools = request.get("tools") if isinstance(request.get("tools"), list) else None
    exchange = Exchange(
        source_id=source_id, messages=messages, completion=content_text(answer.get("content")),
        tool_calls=tool_calls_of(answer, f"{source_id}-call"), tools=tools,
        model=str(response.get("model") or request.get("model") or ""), time_ms=time_ms, finish_ms=time_ms,
        finish_reason=str(choice.get("finish_reason") or "stop"), sampling=sampling)
    return exchange, named, metadata


def _user(line: dict, metadata: dict) -> str:
    request = line.get("request", line)
    user = request.get("user") if isinstance(request, dict) else None
    user = user or metadata.get("user_id")
    return user if isinstance(user, str) else ""


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}
