"""OpenAI chat messages to a prompt (liverl.contracts.chat, shared with `liverl import`), and a completion's text
back to tool calls. Tool calls come back when the completion is a JSON object
{"name": ..., "arguments": {...}} (optionally inside <tool_call>...</tool_call>) naming an offered tool.

A forced tool_choice ("required", or one named function) is honoured without constraining decoding: the reply
is made to open as that JSON object (ForcedToolCall.opening, written after the template's generation prompt)
and the policy writes the rest. The opening was not sampled, so it is recorded as the end of the prompt.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass(frozen=True)
class ForcedToolCall:
    """The tool call a request forces: any offered tool (tool_choice "required", name None) or the one named."""

    name: str | None = None

    @property
    def opening(self) -> str:
        """What the reply is made to start with: the JSON call up to the tool's name ("required"), or up to its
        arguments (a named function)."""
        if self.name is None:
            return '{"name": "'
        return '{"name": ' + json.dumps(self.name) + ', "arguments": '

    def met_by(self, calls: list[dict[str, Any]]) -> bool:
        """Whether the tool calls parsed from the reply are what was forced."""
        return bool(calls) and (self.name is None or all(c["function"]["name"] == self.name for c in calls))


def forced_tool_call(required: bool, name: str | None, offered: list[str] | None) -> ForcedToolCall | None:
    """The forced call of a tool_choice ("required": required; a named function: its name), None when nothing is
    forced. ValueError, saying what to send, when no tools are offered or the named one is not among them."""
    if not required and name is None:
        return None
    if not offered:
        raise ValueError('a forced tool_choice ("required" or a named function) needs tools: offer them in '
                         '`tools`, or send tool_choice "auto" or "none"')
    if name is not None and name not in offered:
        raise ValueError(f"tool_choice names the function {name!r}, which is not among the offered tools "
                         f"({', '.join(offered[:8])}{', ...' if len(offered) > 8 else ''}): name one of them")
    return ForcedToolCall(name)


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
