"""How OpenAI chat messages become a policy's prompt text: the one rendering serving samples from and
`liverl import` rebuilds token ids with, so an imported prompt tokenizes exactly as a served one would.

A policy with a chat template renders with it (tools included). A policy without one (the tiny policies of
tests and the demo) gets a plain transcript, "role: content" lines, that keeps tool calls and tool results
visible to the model.
"""

from __future__ import annotations

import json
from typing import Any


def render_chat(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    if getattr(tokenizer, "chat_template", None):
        # Content given as a list of text parts renders as its text, and an assistant turn that only calls tools
        # (content null or absent, as every agent framework sends it back) as "": many templates concatenate content
        # as a string (SmolLM2's `message['content'] + ...` fails on a missing one).
        flat = [m if isinstance(m.get("content"), str) else {**m, "content": content_text(m.get("content"))}
                for m in messages]
        return tokenizer.apply_chat_template(flat, tools=tools or None, add_generation_prompt=True, tokenize=False)
    lines = []
    if tools:
        lines.append("tools: " + json.dumps([t.get("function", t) for t in tools], separators=(",", ":")))
    for message in messages:
        role = message.get("role", "user")
        content = content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            content += (" " if content else "") + json.dumps(
                {"name": function.get("name"), "arguments": function.get("arguments")}, separators=(",", ":"))
        if role == "tool":
            role = f"tool {message.get('tool_call_id', '')}".strip()
        lines.append(f"{role}: {content}")
    lines.append("assistant:")
    return "\n".join(lines)


def content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of [{"type": "text", "text": ...}, ...] (lenient with the
    logs `liverl import` reads: plain string parts are text too, anything else its str())."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)
