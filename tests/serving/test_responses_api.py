"""POST /v1/responses through the official `openai` client, unchanged, against a live server (hf engine): the
response shapes the SDK parses, streaming events in order, previous_response_id within a tenant only, clear
refusals, and the ModelCalls recorded exactly as chat's (token ids, logprobs, one session per conversation)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from safetensors.torch import load_file, save_file

from liverl.contracts import names
from liverl.contracts.chat import render_chat
from liverl.v1 import model_call_pb2
from serving.engines import tokens
from tests.serving.conftest import WORDS, ServerThread, module_topics, read_topic, rejected_total, serving_config

KEYS = {"acme-key": {"tenant": "acme"}, "globex-key": {"tenant": "globex"}, "initech-key": {"tenant": "initech"}}
# One whitespace-free word of the word-level tokenizer: a tool call the tool policy below always writes.
TOOL_CALL = '{"name":"edit","arguments":{"file":"a.py"}}'
EDIT = {"type": "function", "name": "edit", "description": "edit a file",
        "parameters": {"type": "object", "properties": {"file": {"type": "string"}}}}


def _server(stack, tmp_path_factory, policy_dir, name: str):
    tmp = tmp_path_factory.mktemp(name)
    config = serving_config(module_topics(stack, f"{name}-{tmp.name}"), tmp, f"{name}-{tmp.name}",
                            policy_dir=policy_dir, api_keys=KEYS, default_max_tokens=6)
    return ServerThread(config)


@pytest.fixture(scope="module")
def server(stack, tiny_policy_dir, tmp_path_factory):
    with _server(stack, tmp_path_factory, tiny_policy_dir, "responses") as running:
        yield running


@pytest.fixture(scope="module")
def tool_policy_dir(tmp_path_factory):
    """The tiny policy with TOOL_CALL in its vocabulary and weights that make it the likeliest next token after
    any prompt (the final norm's output is that token's embedding, scaled): a real policy that calls a tool."""
    from demo.policy.tiny_policy import build_policy

    folder = build_policy(tmp_path_factory.mktemp("policy") / "tool", [*WORDS, TOOL_CALL])
    weights = load_file(folder / "model.safetensors")
    tool_id = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"][TOOL_CALL]
    embedding = weights["transformer.wte.weight"]
    embedding[tool_id] = embedding[tool_id] / embedding[tool_id].norm() * 10  # logit 100 against about +-2
    weights["transformer.ln_f.weight"].zero_()
    weights["transformer.ln_f.bias"].copy_(embedding[tool_id])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def tool_server(stack, tool_policy_dir, tmp_path_factory):
    with _server(stack, tmp_path_factory, tool_policy_dir, "responses-tool") as running:
        yield running


def _client(server: ServerThread, key: str = "acme-key", **headers) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_base + "/v1", api_key=key, default_headers=headers, max_retries=0)


def _recorded(server: ServerThread, *request_ids: str) -> dict[str, model_call_pb2.ModelCall]:
    """The ModelCalls of these request ids, read back from Kafka."""
    config = server.server.config
    assert server.server.recorder.flush(30)
    wanted = [i.encode() for i in request_ids]
    records = read_topic(config, config.kafka.model_calls_topic, expect=10**6,
                         until=lambda got: all(any(w in r.value for r in got) for w in wanted))
    calls = [model_call_pb2.ModelCall.FromString(r.value) for r in records]
    found = {c.request_id: c for c in calls if c.request_id in request_ids}
    assert set(found) == set(request_ids), "every response is recorded"
    return found


def _prompt_ids(server: ServerThread, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """The prompt token ids the same conversation gets through /v1/chat/completions' rendering."""
    tokenizer = server.server.router.champion.tokenizer
    return tokens.encode(tokenizer, render_chat(tokenizer, messages, tools))


def test_plain_text_is_a_response_the_sdk_parses_and_is_recorded_exactly(server):
    response = _client(server).responses.create(input="fix the file", max_output_tokens=5, temperature=1.0,
                                                extra_body={"seed": 3},
                                                include=["message.output_text.logprobs"])
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.model == server.server.completions.model_name
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant" and message.content[0].type == "output_text"
    assert response.output_text == message.content[0].text
    ext = response.model_extra["liverl"]
    assert response.usage.output_tokens == len(ext["token_ids"]) == len(ext["logprobs"]) >= 1
    assert [lp.logprob for lp in message.content[0].logprobs] == pytest.approx(ext["logprobs"])

    call = _recorded(server, response.id)[response.id]
    assert call.api == "openai-responses" and call.session_id == response.id  # a session of its own
    assert list(call.completion_token_ids) == ext["token_ids"]
    assert list(call.completion_logprobs) == pytest.approx(ext["logprobs"], abs=0)
    assert list(call.prompt_token_ids) == _prompt_ids(server, [{"role": "user", "content": "fix the file"}])
    assert response.usage.input_tokens == len(call.prompt_token_ids)
    assert call.sampling.max_tokens == 5 and call.sampling.seed == 3


def test_instructions_and_input_items_render_as_the_same_chat(server):
    items = [{"role": "user", "content": "fix the file"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "search file"}]},
             {"role": "developer", "content": [{"type": "input_text", "text": "be"}, {"type": "input_text",
                                                                                     "text": "brief"}]},
             {"role": "user", "content": "ask"}]
    response = _client(server).responses.create(instructions="edit done", input=items, max_output_tokens=2,
                                                metadata={"liverl_session_id": "s-items"})
    call = _recorded(server, response.id)[response.id]
    assert call.session_id == "s-items"
    assert list(call.prompt_token_ids) == _prompt_ids(server, [
        {"role": "system", "content": "edit done"}, {"role": "user", "content": "fix the file"},
        {"role": "assistant", "content": "search file"}, {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "ask"}])


def test_content_parts_and_strings_give_the_same_completion(server):
    client = _client(server)
    as_string = client.responses.create(input="search file", temperature=0, max_output_tokens=4)
    as_parts = client.responses.create(input=[{"role": "user", "content": [{"type": "input_text",
                                                                             "text": "search file"}]}],
                                       temperature=0, max_output_tokens=4)
    assert as_parts.output_text == as_string.output_text
    assert as_parts.model_extra["liverl"]["token_ids"] == as_string.model_extra["liverl"]["token_ids"]
    with pytest.raises(openai.BadRequestError) as image:
        client.responses.create(input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}])
    assert "reads text only" in str(image.value)


def test_chat_takes_content_parts_as_smolagents_sends_them(server):
    client = _client(server)
    as_parts = client.chat.completions.create(model="", max_tokens=3, temperature=0, messages=[
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "fix the file"}]}])
    as_string = client.chat.completions.create(model="", max_tokens=3, temperature=0, messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "fix the file"}])
    assert as_parts.model_extra["liverl"]["token_ids"] == as_string.model_extra["liverl"]["token_ids"]
    with pytest.raises(openai.BadRequestError) as image:
        client.chat.completions.create(model="", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}])
    assert "reads text only" in str(image.value)


def test_a_function_call_round_trip_is_one_session(tool_server):
    client = _client(tool_server)
    first = client.responses.create(instructions="you edit files", input="fix a.py", tools=[EDIT],
                                    max_output_tokens=1, temperature=0)  # one token: the whole call
    [call_item] = first.output
    assert call_item.type == "function_call" and call_item.name == "edit"
    assert call_item.arguments == '{"file": "a.py"}' and call_item.call_id.startswith("call_")
    assert first.output_text == ""

    second = client.responses.create(previous_response_id=first.id, tools=[EDIT], max_output_tokens=1,
                                     temperature=0, input=[{"type": "function_call_output",
                                                            "call_id": call_item.call_id, "output": "done"}])
    recorded = _recorded(tool_server, first.id, second.id)
    assert recorded[first.id].session_id == recorded[second.id].session_id == first.id  # one trajectory
    assert recorded[second.id].api == "openai-responses"
    tool = {"id": call_item.call_id, "type": "function", "function": {"name": "edit", "arguments": '{"file": "a.py"}'}}
    tools = [{"type": "function", "function": {k: v for k, v in EDIT.items() if k != "type"}}]
    assert list(recorded[second.id].prompt_token_ids) == _prompt_ids(tool_server, [
        {"role": "user", "content": "fix a.py"}, {"role": "assistant", "content": None, "tool_calls": [tool]},
        {"role": "tool", "tool_call_id": call_item.call_id, "content": "done"}], tools)  # instructions not carried

    # A result for a call the conversation never made, and tool_choice "none" (no tools rendered, none parsed).
    with pytest.raises(openai.BadRequestError) as unknown_call:
        client.responses.create(previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": "call_nobody", "output": "x"}])
    assert "no function_call of this conversation" in str(unknown_call.value)
    plain = client.responses.create(input="fix a.py", tools=[EDIT], tool_choice="none", max_output_tokens=1)
    assert plain.output[0].type == "message" and plain.output_text == TOOL_CALL


def test_a_streamed_function_call_sends_its_arguments(tool_server):
    events = list(_client(tool_server).responses.create(input="fix a.py", tools=[EDIT], max_output_tokens=1,
                                                        stream=True))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[3].delta == events[4].arguments == events[5].item.arguments == '{"file": "a.py"}'
    assert events[-1].response.output[0].call_id == events[5].item.call_id

    model = tool_server.server.completions.model_name  # the SDK's own accumulator of a stream takes it too
    with _client(tool_server).responses.stream(model=model, input="fix a.py", tools=[EDIT],
                                               max_output_tokens=1) as stream:
        accumulated = stream.get_final_response()
    assert accumulated.output[0].type == "function_call" and accumulated.output[0].arguments == '{"file": "a.py"}'


def test_streaming_events_come_in_order_and_add_up(server):
    client = _client(server)
    events = list(client.responses.create(input="fix the file", max_output_tokens=5, stream=True,
                                          extra_body={"seed": 9}))
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * len(deltas),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     kinds[-1]] and kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    text = "".join(d.delta for d in deltas)
    assert text == events[-4].text == final.output_text
    ext = final.model_extra["liverl"]
    assert [i for d in deltas for i in d.model_extra["liverl"]["token_ids"]] == ext["token_ids"]
    call = _recorded(server, final.id)[final.id]
    assert list(call.completion_token_ids) == ext["token_ids"] and call.api == "openai-responses"



def test_previous_response_id_stays_within_its_tenant(server):
    acme, globex = _client(server), _client(server, "globex-key")
    first = acme.responses.create(input="fix the file", max_output_tokens=2, user="end-user-7")
    follow = acme.responses.create(input="ask", previous_response_id=first.id, max_output_tokens=2)
    calls = _recorded(server, first.id, follow.id)
    assert calls[first.id].session_id == calls[follow.id].session_id  # the user's pseudonym, continued
    assert calls[first.id].session_id.startswith("u-") and "end-user-7" not in calls[first.id].session_id
    with pytest.raises(openai.NotFoundError) as other_tenant:
        globex.responses.create(input="ask", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        acme.responses.create(input="ask", previous_response_id="resp_0123")
    assert "not a response this server keeps for your tenant" in str(other_tenant.value)
    assert other_tenant.value.body["code"] == unknown.value.body["code"] == "unknown-previous-response"
    unkept = acme.responses.create(input="fix", max_output_tokens=1, store=False)
    with pytest.raises(openai.NotFoundError):
        acme.responses.create(input="ask", previous_response_id=unkept.id)
    # A header still names the session of a continuation (explicit ids win).
    headed = _client(server, **{names.META_SESSION_ID: "s-header"}).responses.create(
        input="ask", previous_response_id=first.id, max_output_tokens=1)
    assert headed.model_extra["liverl"]["session_id"] == "s-header"


def test_a_new_tenants_first_response_can_be_continued(server):
    """The first response of a tenant no call has reached yet (no pseudonym key until then) is kept under the key
    its call made, so continuing it is not mistaken for the tenant's erasure."""
    from liverl.privacy import key_store

    assert key_store(server.server.config).pseudonym_key_version("initech") is None  # only this test uses it
    initech = _client(server, "initech-key")
    first = initech.responses.create(input="fix the file", max_output_tokens=2)
    follow = initech.responses.create(input="ask", previous_response_id=first.id, max_output_tokens=1)
    calls = _recorded(server, first.id, follow.id)
    assert calls[first.id].session_id == calls[follow.id].session_id


def test_a_forgotten_users_kept_conversation_cannot_be_continued(server):
    """`liverl forget` reaches what serving keeps in memory for previous_response_id, not only what it stored: it
    leaves memory within a sweep, and a call still naming the erased session keeps nothing."""
    from liverl.privacy import key_store
    from liverl.privacy.subject import resolve

    acme = _client(server)
    gone = "ticket-jane.doe@example.com"  # a session id holding an email: records carry its redacted stand-in
    named = {"liverl_session_id": gone}
    kept = acme.responses.create(input="fix the file", max_output_tokens=2, user="end-user-forget-me", metadata=named)
    other = acme.responses.create(input="fix the file", max_output_tokens=2, user="end-user-stays")
    recorded = _recorded(server, kept.id, other.id)  # the user is linked to the session by the recording thread
    assert recorded[kept.id].session_id != gone  # redacted in the record, as it is when the key store forgets it
    stays = recorded[other.id].session_id
    assert {gone, stays} <= server.call(_sessions_in_memory(server.server))
    store = key_store(server.server.config)
    found = resolve(store, "acme", user="end-user-forget-me")
    assert found.sessions
    store.forget("acme", sorted(found.sessions), found.user)  # what `liverl forget --user` does to the keys
    # it leaves memory by itself (the kept conversation and its stitching entries), not at their ttl of an hour
    for _ in range(600):  # a sweep every serving.erasure_sweep_s: stop on it, the 60 s only a ceiling
        if gone not in server.call(_sessions_in_memory(server.server)):
            break
        time.sleep(0.1)
    in_memory = server.call(_sessions_in_memory(server.server))
    assert gone not in in_memory and stays in in_memory
    again = acme.responses.create(input="and now?", max_output_tokens=1, metadata=named)  # still served
    assert gone not in server.call(_sessions_in_memory(server.server))  # but nothing of it kept
    for erased in (kept, again):
        with pytest.raises(openai.NotFoundError):
            acme.responses.create(input="ask", previous_response_id=erased.id, max_output_tokens=1)
    assert acme.responses.create(input="ask", previous_response_id=other.id, max_output_tokens=1).id


async def _sessions_in_memory(policy_server) -> set[str]:
    """The sessions of what serving keeps in memory (responses, stitched calls, quoted tool calls), read on its
    own event loop."""
    stitcher = policy_server.completions.stitcher
    kept = [policy_server.responses, stitcher.entries, stitcher.quoted]
    return {lru.peek(tenant, key).session_id for lru in kept for tenant in lru.tenants() for key in lru.keys(tenant)}


@pytest.mark.parametrize("body, param", [
    ({"input": [{"type": "web_search_call", "id": "w", "status": "completed"}]}, "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),  # forcing a call with no tools to call
    ({"input": "x", "tools": [EDIT], "tool_choice": {"type": "function", "name": "search"}}, "tool_choice"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning"),
    ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format"),
    ({"input": "x", "include": ["reasoning.encrypted_content"]}, "include"),
    ({"input": "x", "truncation": "auto"}, "truncation"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "top_logprobs": 3}, "top_logprobs"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.message.content"),
    ({"input": []}, "input"),
])
def test_what_is_not_served_is_refused_and_says_so(server, body, param):
    before = rejected_total(server)
    refused = httpx.post(server.http_base + "/v1/responses", json=body, headers={"authorization": "Bearer acme-key"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["message"] and error["code"] and error["param"].startswith(param), error
    assert rejected_total(server) == before + 1  # counted (and dead-lettered) as chat's refusals are


def test_retrieving_a_response_is_refused_clearly(server):
    with pytest.raises(openai.NotFoundError) as refused:
        _client(server).responses.retrieve("resp_0123")
    assert "only POST /v1/responses is served" in str(refused.value)
