"""OpenAI chat messages to a prompt, and a completion's text back to tool calls.

A policy with a chat template renders with it (tools included). The tiny policies of tests and the
demo have none; they get a plain transcript ("role: content" lines) that keeps tool calls and
tool results visible to the model. Tool calls come back when the completion is a JSON object
{"name": ..., "arguments": {...}} (optionally inside <tool_call>...</tool_call>) naming an offered tool.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def render_chat(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                             tokenize=False)
    lines = []
    if tools:
        lines.append("tools: " + json.dumps([t.get("function", t) for t in tools], separators=(",", ":")))
    for message in messages:
        role = message.get("role", "user")
        content = _content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            content += (" " if content else "") + json.dumps(
                {"name": function.get("name"), "arguments": function.get("arguments")}, separators=(",", ":"))
        if role == "tool":
            role = f"tool {message.get('tool_call_id', '')}".strip()
        lines.append(f"{role}: {content}")
    lines.append("assistant:")
    return "\n".join(lines)


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # [{"type": "text", "text": ...}, ...]
    return " ".join(part.get("text", "") for part in content if isinstance(part, dict))


def parse_tool_calls(text: str, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI tool_calls found in a completion, or [] when it is plain content."""
    if not tools:
        return []
    offered = {(t.get("function") or t).get("name") for t in tools}
    tagged = TOOL_CALL_TAG.findall(text)
    candidates = tagged or [text.strip()]
    calls = []
    for candidate in candidates:
        try:
            parsed = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            return []
        for item in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(item, dict) or item.get("name") not in offered:
                return []
            arguments = item.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": item["name"], "arguments": arguments}})
    return calls
