"""OpenAI-shaped chat messages: their text, their tool calls, and the prompt and completion text the
policy's tokenizer turns into token ids.

The prompt is rendered the way serving renders a chat request (serving/http/chat.py's render_chat): the
policy's chat template when it has one, else the plain "role: content" transcript the tiny test and
demo policies use. Keep the two in step: an imported prompt should tokenize like a served one.
"""

from __future__ import annotations

import json

from ingest.importers.literal import python_literal
from ingest.importers.model import OBSERVATION_OF, ToolCallSpec, TooManyEvents
from liverl.contracts.chat import render_chat


def tool_calls_of(message: dict, fallback_id: str, limit: int | None = None) -> list[ToolCallSpec]:
    """The OpenAI tool_calls of an assistant message; a call that does not parse comes back invalid.
    limit: the most calls to read (TooManyEvents past it, before any is read); None: no limit."""
    raw = message.get("tool_calls")
    if not raw:
        return []
    if isinstance(raw, str):  # some loggers wrote the list's repr
        try:
            raw = json.loads(raw)
        except ValueError:
            try:
                raw = python_literal(raw)  # bounded: client text, never ast.literal_eval
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                return [ToolCallSpec(fallback_id, "", raw[:1000], valid=False,
                                     error="tool_calls is neither JSON nor a literal list of calls")]
    if limit is not None and isinstance(raw, list) and len(raw) > limit:
        raise TooManyEvents(len(raw), limit, "tool calls in one message")
    calls = []
    for index, call in enumerate(raw if isinstance(raw, list) else [raw]):
        call_id = f"{fallback_id}.{index}"
        if not isinstance(call, dict):
            calls.append(ToolCallSpec(call_id, "", json.dumps(call, default=str), False,
                                      "a tool call is not an object"))
            continue
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(parsed_call(str(call.get("id") or call_id), name, arguments))
    return calls


def parsed_call(call_id: str, name: str, arguments_json: str) -> ToolCallSpec:
    """A call whose arguments are checked: not a JSON object means an invalid call (kept, marked)."""
    if not name:
        return ToolCallSpec(call_id, name, arguments_json, False, "the tool call names no tool")
    try:
        arguments = json.loads(arguments_json) if arguments_json.strip() else {}
    except ValueError as error:
        return ToolCallSpec(call_id, name, arguments_json, False, f"arguments are not valid JSON: {error}")
    if not isinstance(arguments, dict):
        return ToolCallSpec(call_id, name, arguments_json, False, "arguments are not a JSON object")
    return ToolCallSpec(call_id, name, arguments_json)


def completion_text(text: str, tool_calls: list[ToolCallSpec]) -> str:
    """What the model wrote: its text, then each call as <tool_call>{"name", "arguments"}</tool_call>
    (the form serving parses tool calls from)."""
    parts = [text] if text else []
    for call in tool_calls:
        try:
            arguments = json.loads(call.arguments_json) if call.valid and call.arguments_json.strip() else None
        except ValueError:
            arguments = None
        body = {"name": call.name, "arguments": call.arguments_json if arguments is None else arguments}
        parts.append(f"<tool_call>{json.dumps(body, separators=(',', ':'))}</tool_call>")
    return "\n".join(parts)


def render_prompt(tokenizer, messages: list[dict], tools: list[dict] | None) -> str:
    """The prompt text as serving would render these messages for this tokenizer (liverl.contracts.chat)."""
    return render_chat(tokenizer, [{k: v for k, v in m.items() if k != OBSERVATION_OF} for m in messages], tools)
