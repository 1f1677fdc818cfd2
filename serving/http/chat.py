"""OpenAI chat messages to a prompt (liverl.contracts.chat, shared with `liverl import`), and a completion's text
back to tool calls. Tool calls come back when the completion is a JSON object
{"name": ..., "arguments": {...}} (optionally inside <tool_call>...</tool_call>) naming an offered tool.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


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
