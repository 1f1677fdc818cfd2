"""Chat rendering without a template keeps tool calls and results; tool calls parse only for offered tools."""

import json

from hypothesis import given
from hypothesis import strategies as st

from liverl.contracts.chat import render_chat
from serving.chat import parse_tool_calls

TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]


class _NoTemplate:
    chat_template = None


def test_transcript_keeps_tools_calls_and_results():
    prompt = render_chat(_NoTemplate(), [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ], TOOLS)
    lines = prompt.splitlines()
    assert lines[0].startswith("tools: ") and '"edit"' in lines[0]
    assert lines[1:] == ["system: be brief", "user: fix it", 'assistant: {"name":"edit","arguments":"{}"}',
                         "tool c1: ok", "assistant:"]


def test_tool_call_shapes():
    assert parse_tool_calls('{"name": "edit", "arguments": {"f": 1}}', TOOLS)[0]["function"]["arguments"] == '{"f": 1}'
    tagged = '<tool_call>{"name":"edit","arguments":{}}</tool_call> <tool_call>{"name":"edit"}</tool_call>'
    two = parse_tool_calls(tagged, TOOLS)
    assert [c["function"]["name"] for c in two] == ["edit", "edit"]
    assert parse_tool_calls('{"name": "edit"}', None) == []


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_and_only_names_offered_tools(text):
    for call in parse_tool_calls(text, TOOLS):
        assert call["function"]["name"] == "edit"
        json.loads(call["function"]["arguments"])
