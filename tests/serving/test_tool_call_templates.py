"""An assistant turn that only calls tools (content null, as every agent framework sends it back) renders through a
template that joins content as a string: SmolLM2's refused the second call of every tool round trip with
"'dict object' has no attribute 'content'" (chat) or a None concatenation (Responses); render_chat now gives such a
turn content "" for the template only."""

import pytest

from liverl.contracts.chat import render_chat
from tests.serving.test_chat import SMOLLM2_TEMPLATE, TOOLS

CALL = {"id": "call_1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}


@pytest.fixture
def smollm2_tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    return tokenizer


@pytest.mark.parametrize("content", [None, "absent"])
def test_a_chat_tool_call_turn_renders_with_empty_content(smollm2_tokenizer, content):
    from serving.http.openai_schema import ChatRequest

    assistant = {"role": "assistant", "tool_calls": [CALL]} | ({} if content == "absent" else {"content": content})
    request = ChatRequest.model_validate({"tools": TOOLS, "messages": [
        {"role": "user", "content": "fix the file"}, assistant, {"role": "tool", "tool_call_id": "call_1",
                                                                 "content": "done"}]})
    with pytest.raises(Exception, match="content"):  # what the template itself does with the body as sent
        smollm2_tokenizer.apply_chat_template(request.message_dicts(), add_generation_prompt=True, tokenize=False)
    messages = request.message_dicts()
    prompt = render_chat(smollm2_tokenizer, messages, request.tool_dicts())
    assert "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\ndone<|im_end|>" in prompt
    assert messages[1].get("content") is None  # the conversation kept (stitching, the record) is left as sent


def test_a_responses_function_call_renders_with_empty_content(smollm2_tokenizer):
    from serving.http.responses.items import conversation, prompt_messages
    from serving.http.responses.schema import ResponsesRequest

    request = ResponsesRequest.model_validate({"instructions": "be brief", "input": [
        {"role": "user", "content": "fix the file"},
        {"type": "function_call", "call_id": "call_1", "name": "edit", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "done"}]})
    messages, _ = conversation(request, None)
    rendered = prompt_messages(request, messages)
    prompt = render_chat(smollm2_tokenizer, rendered, request.tool_dicts())
    assert prompt.startswith("<|im_start|>system\nbe brief<|im_end|>")
    assert "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\ndone<|im_end|>" in prompt
    assert rendered[2]["content"] is None  # the conversation kept (stitching, state) is left as sent
