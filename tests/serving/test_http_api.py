"""The OpenAI-compatible API through the official `openai` client, unchanged."""

import httpx
import openai
import pytest

from liverl.contracts import names
from liverl.v1 import model_call_pb2
from tests.conftest import stored_key
from tests.serving.conftest import read_topic

HEADERS = {names.META_SESSION_ID: "s-http", names.META_AGENT_ROLE: "orchestrator"}


def _client(server, key="user-key"):
    return openai.OpenAI(base_url=server.http_base + "/v1", api_key=key, default_headers=HEADERS, max_retries=0)


def test_chat_completion_with_version_header_and_record(api_server):
    client = _client(api_server)
    model = api_server.server.config.mlflow.registered_model
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "fix the file"}], max_tokens=4, seed=1, temperature=1.0,
        logprobs=True)
    completion = raw.parse()
    assert raw.headers[names.META_POLICY_VERSION] == "1"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].finish_reason in ("stop", "length")
    extension = completion.model_extra["liverl"]
    assert extension["policy_version"] == "1"
    assert len(extension["token_ids"]) == len(extension["logprobs"]) == completion.usage.completion_tokens
    assert [c.logprob for c in completion.choices[0].logprobs.content] == pytest.approx(extension["logprobs"])

    config = api_server.server.config
    api_server.server.recorder.flush(30)
    wanted = extension["request_id"].encode()
    records = read_topic(config, config.kafka.model_calls_topic, expect=1000,
                         until=lambda got: any(wanted in r.value for r in got))
    key = stored_key(config, "acme", "s-http")  # user-key is acme's
    calls = [model_call_pb2.ModelCall.FromString(r.value) for r in records if r.key == key]
    mine = [c for c in calls if c.request_id == extension["request_id"]]
    assert len(mine) == 1 and mine[0].api == "openai-chat" and mine[0].policy_version == "1"
    assert list(mine[0].completion_token_ids) == extension["token_ids"]


def test_completions_and_streams(api_server):
    client = _client(api_server)
    model = api_server.server.config.mlflow.registered_model
    plain = client.completions.create(model=model, prompt="search file", max_tokens=5, seed=4, temperature=1.0)
    streamed = list(client.completions.create(model=model, prompt="search file", max_tokens=5, seed=4,
                                              temperature=1.0, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == plain.choices[0].text
    assert streamed[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    chat_chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "ask"}],
                                                      max_tokens=3, stream=True))
    assert chat_chunks[0].choices[0].delta.role == "assistant"
    assert chat_chunks[-1].choices[0].finish_reason in ("stop", "length")
    models = client.models.list()
    assert models.data[0].id == model and models.data[0].model_extra["policy_version"] == "1"


def test_tool_calls_pass_through(api_server):
    from serving.http.chat import parse_tool_calls

    client = _client(api_server)
    model = api_server.server.config.mlflow.registered_model
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    history = [
        {"role": "user", "content": "fix the file"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]
    completion = client.chat.completions.create(model=model, messages=history, tools=tools, max_tokens=3)
    assert completion.choices[0].message.role == "assistant"
    # What the model's text becomes: a tool call when it names an offered tool, plain content otherwise.
    calls = parse_tool_calls('<tool_call>{"name": "edit", "arguments": {"file": "a.py"}}</tool_call>', tools)
    assert calls[0]["function"] == {"name": "edit", "arguments": '{"file": "a.py"}'}
    assert parse_tool_calls('{"name": "rm", "arguments": {}}', tools) == []
    assert parse_tool_calls("just text", tools) == []


def test_auth_and_bad_input_errors_are_openai_shaped(api_server):
    model = api_server.server.config.mlflow.registered_model
    with pytest.raises(openai.AuthenticationError):
        _client(api_server, key="wrong").completions.create(model=model, prompt="fix", max_tokens=2)
    with pytest.raises(openai.NotFoundError) as unknown_model:
        _client(api_server).completions.create(model="gpt-9", prompt="fix", max_tokens=2)
    assert model in str(unknown_model.value)
    with pytest.raises(openai.BadRequestError):
        _client(api_server).completions.create(model=model, prompt="fix", max_tokens=2, top_p=3.0)
    malformed = httpx.post(api_server.http_base + "/v1/chat/completions", json={"model": model},
                           headers={"authorization": "Bearer user-key"})
    assert malformed.status_code == 400 and "messages" in malformed.json()["error"]["message"]
    admin = httpx.post(api_server.http_base + "/admin/rollback", json={}, headers={"authorization": "Bearer user-key"})
    assert admin.status_code == 401
