"""A forced tool_choice ("required" or a named function) through the official `openai` client, unchanged, against a
live server (hf engine) serving SmolLM2-135M-Instruct greedy: the reply opens as the forced JSON call, the opening is
recorded as the end of the prompt and only the sampled tokens as the completion (re-scored by the trainer to the
recorded logprobs), the reply ends with the token that closes the call's JSON object, a reply the policy did not
complete is sent as content and counted, and a choice naming no offered tool is refused.

SmolLM2 follows a one-shot example in its instructions (STEER, as tests/agents do) and then completes both openings
as the call; without the example it names a tool of its own under "required" (the unmet path), and after a named
opening it completes the arguments and goes on in prose (cut where the object closes).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import httpx
import openai
import pytest

from liverl.contracts.chat import render_chat
from liverl.v1 import model_call_pb2
from serving.engines import tokens
from serving.generation import json_object_end
from serving.http.chat import ForcedToolCall
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    read_topic,
    reference_logprobs,
    rejected_total,
    serving_config,
)

KEYS = {"acme-key": {"tenant": "acme"}}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
STEER = f"You only ever output JSON. Example:\nUser: New task: weather in Paris?\nAssistant: {json.dumps(CALL)}"
STEERED = [{"role": "system", "content": STEER}, {"role": "user", "content": "New task: weather in Paris?"}]
UNSTEERED = [{"role": "user", "content": "What is the weather in Paris?"}]
FUNCTION = {"name": "get_weather", "description": "the weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
CHAT_TOOLS = [{"type": "function", "function": FUNCTION}]  # also how Responses' tools reach the template
RESPONSES_TOOLS = [{"type": "function", **FUNCTION}]
MAX_TOKENS = 30  # the call is ~15 tokens
UNMET = "liverl_serving_forced_tool_call_unmet_total"
API = {"chat": "openai-chat", "responses": "openai-responses"}


@pytest.fixture(scope="module")
def server(stack, smollm2_converted, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tool-choice")
    config = serving_config(module_topics(stack, f"tool-choice-{tmp.name}"), tmp, f"tool-choice-{tmp.name}",
                            policy_dir=smollm2_converted[0], api_keys=KEYS, default_max_tokens=MAX_TOKENS,
                            max_model_len=2048)
    with ServerThread(config) as running:
        yield running


@dataclass
class Reply:
    """What the client read: its request id, the tool calls (name, arguments), the content and how it ended."""

    id: str
    calls: list[tuple[str, dict]]
    content: str | None
    finish: str  # chat's finish_reason, or the response's status


def _choice(api: str, forced: str):
    if forced == "required":
        return "required"
    return {"type": "function", "function": {"name": "get_weather"}} if api == "chat" else \
        {"type": "function", "name": "get_weather"}


def _ask(server: ServerThread, api: str, forced: str, stream: bool, messages: list[dict]) -> Reply:
    client = openai.OpenAI(base_url=server.http_base + "/v1", api_key="acme-key", max_retries=0)
    model = server.server.completions.model_name
    if api == "chat":
        asked = dict(model=model, messages=messages, tools=CHAT_TOOLS, tool_choice=_choice(api, forced),
                     temperature=0, max_tokens=MAX_TOKENS)
        if not stream:
            completion = client.chat.completions.create(**asked)
            choice = completion.choices[0]
            return Reply(completion.id, [(c.function.name, json.loads(c.function.arguments))
                                         for c in choice.message.tool_calls or ()],
                         choice.message.content, choice.finish_reason)
        chunks = list(client.chat.completions.create(**asked, stream=True))
        deltas = [c.choices[0] for c in chunks]
        calls = [t for d in deltas for t in d.delta.tool_calls or ()]
        return Reply(chunks[0].id, [(c.function.name, json.loads(c.function.arguments)) for c in calls],
                     "".join(d.delta.content or "" for d in deltas) or None,
                     next(d.finish_reason for d in deltas if d.finish_reason))
    system = [m["content"] for m in messages if m["role"] == "system"]
    asked = dict(model=model, input=[m for m in messages if m["role"] != "system"], tools=RESPONSES_TOOLS,
                 tool_choice=_choice(api, forced), temperature=0, max_output_tokens=MAX_TOKENS,
                 instructions=system[0] if system else None)
    if stream:
        events = list(client.responses.create(**asked, stream=True))
        assert events[-1].type in ("response.completed", "response.incomplete")
        response = events[-1].response
    else:
        response = client.responses.create(**asked)
    calls = [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
    texts = [i.content[0].text for i in response.output if i.type == "message"]
    return Reply(response.id, calls, texts[0] if texts else None, response.status)


def _recorded(server: ServerThread, request_id: str) -> model_call_pb2.ModelCall:
    """The ModelCall of a request id, read back from Kafka."""
    config = server.server.config
    assert server.server.recorder.flush(30)
    records = read_topic(config, config.kafka.model_calls_topic, expect=10**6,
                         until=lambda got: any(request_id.encode() in r.value for r in got))
    found = [c for c in (model_call_pb2.ModelCall.FromString(r.value) for r in records) if c.request_id == request_id]
    assert len(found) == 1, "every reply is recorded once"
    return found[0]


def _opening(forced: str) -> str:
    return ForcedToolCall(None if forced == "required" else "get_weather").opening


def _split_prompt(server: ServerThread, call: model_call_pb2.ModelCall, messages: list[dict]
                  ) -> tuple[list[int], list[int]]:
    """The recorded prompt as (what the template rendered, what follows it): the latter must be the opening's ids."""
    tokenizer = server.server.router.champion.tokenizer
    rendered = tokens.encode(tokenizer, render_chat(tokenizer, messages, CHAT_TOOLS))
    prompt = list(call.prompt_token_ids)
    assert prompt[:len(rendered)] == rendered  # the chat's own prompt, as without forcing
    return rendered, prompt[len(rendered):]


def _sampled_text(server: ServerThread, call: model_call_pb2.ModelCall) -> str:
    return tokens.decode(server.server.router.champion.tokenizer, list(call.completion_token_ids))


def _closed_call(server: ServerThread, call: model_call_pb2.ModelCall, forced: str) -> dict:
    """The JSON call that the opening and the recorded completion make, asserting that the completion's last token is
    the one that closes it (nothing sampled after the call is kept) and that only whitespace trails it."""
    tokenizer, sampled = server.server.router.champion.tokenizer, list(call.completion_token_ids)
    text = _opening(forced) + tokens.decode(tokenizer, sampled)
    end = json_object_end(text)
    assert end is not None and not text[end:].strip(), text
    assert json_object_end(_opening(forced) + tokens.decode(tokenizer, sampled[:-1])) is None, text
    return json.loads(text[:end])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("forced", ["required", "named"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_forced_call_opens_the_reply_and_the_opening_is_recorded_as_prompt(server, smollm2_converted, api, forced,
                                                                             stream):
    reply = _ask(server, api, forced, stream, STEERED)
    assert reply.calls == [(CALL["name"], CALL["arguments"])] and reply.content is None
    assert reply.finish == ("tool_calls" if api == "chat" else "completed")

    call = _recorded(server, reply.id)
    assert call.api == API[api] and call.finish_reason == "stop"
    tokenizer = server.server.router.champion.tokenizer
    rendered, after = _split_prompt(server, call, STEERED)
    assert after == tokenizer(_opening(forced), add_special_tokens=False)["input_ids"]  # the opening ends the prompt
    assert _closed_call(server, call, forced) == CALL  # the completion is the rest, sampled

    if stream:
        return  # greedy: the same tokens as the whole reply's, re-scored there
    # The trainer re-scores prompt -> completion exactly as recorded; the same tokens after the rendered prompt
    # alone (the opening left out) would score otherwise.
    completion, prompt = list(call.completion_token_ids), list(call.prompt_token_ids)
    policy = smollm2_converted[0]
    assert list(call.completion_logprobs) == pytest.approx(reference_logprobs(policy, prompt, completion), abs=1e-4)
    assert list(call.completion_logprobs) != pytest.approx(reference_logprobs(policy, rendered, completion), abs=1e-2)


@pytest.mark.parametrize("api, stream", [("chat", False), ("chat", True), ("responses", True), ("responses", False)])
def test_a_named_call_ends_where_its_object_closes_though_the_policy_wrote_on(server, api, stream):
    reply = _ask(server, api, "named", stream, UNSTEERED)
    assert [name for name, _ in reply.calls] == ["get_weather"] and reply.content is None
    call = _recorded(server, reply.id)
    assert call.finish_reason == "stop" and len(call.completion_token_ids) < MAX_TOKENS
    assert _closed_call(server, call, "named")["name"] == "get_weather"


@pytest.mark.parametrize("api, stream", [("chat", False), ("chat", True), ("responses", True), ("responses", False)])
def test_a_forced_call_the_policy_did_not_complete_is_sent_as_content_and_counted(server, caplog, api, stream):
    forced = "required"
    before = server.server.metrics.value(UNMET, {"api": API[api]})
    with caplog.at_level(logging.WARNING, logger="liverl.serving.http"):
        reply = _ask(server, api, forced, stream, UNSTEERED)
    assert reply.calls == []
    call = _recorded(server, reply.id)
    assert reply.content == _opening(forced) + _sampled_text(server, call)  # what was written, nothing made up
    assert call.finish_reason in ("stop", "length")  # the engine's, not "tool_calls"
    if api == "chat":
        assert reply.finish == call.finish_reason
    else:
        assert reply.finish == ("incomplete" if call.finish_reason == "length" else "completed")
    assert server.server.metrics.value(UNMET, {"api": API[api]}) == before + 1
    assert [r for r in caplog.records if "forced tool call not completed" in r.getMessage()
            and reply.id in r.getMessage()]
    _, after = _split_prompt(server, call, UNSTEERED)
    assert after == server.server.router.champion.tokenizer(_opening(forced), add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("path, body, says", [
    ("/v1/chat/completions", {"messages": UNSTEERED, "tools": CHAT_TOOLS,
                              "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "'get_time', which is not among the offered tools"),
    ("/v1/chat/completions", {"messages": UNSTEERED, "tool_choice": "required"}, "needs tools"),
    ("/v1/chat/completions", {"messages": UNSTEERED, "tools": CHAT_TOOLS,
                              "tool_choice": {"type": "function", "function": {"name": 5}}}, "tool_choice"),
    ("/v1/chat/completions", {"messages": UNSTEERED, "tools": CHAT_TOOLS,
                              "tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice"),
    ("/v1/responses", {"input": "weather?", "tools": RESPONSES_TOOLS,
                       "tool_choice": {"type": "function", "name": "get_time"}},
     "'get_time', which is not among the offered tools"),
    ("/v1/responses", {"input": "weather?", "tool_choice": {"type": "function", "name": "get_weather"}},
     "needs tools"),
    ("/v1/responses", {"input": "weather?", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function"}},
     "tool_choice"),
], ids=["chat-not-offered", "chat-no-tools", "chat-name-type", "chat-responses-shape", "responses-not-offered",
        "responses-no-tools", "responses-no-name"])
def test_a_forced_choice_naming_no_offered_tool_is_refused(server, path, body, says):
    before = rejected_total(server)
    refused = httpx.post(server.http_base + path, json=body, headers={"authorization": "Bearer acme-key"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"].startswith("tool_choice") and says in error["message"], error
    assert rejected_total(server) == before + 1
