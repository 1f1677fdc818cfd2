"""Zero-code capture: an unmodified `openai` client, no liverl headers, and every call still lands in a session."""

import grpc
import httpx
import openai

from liverl.contracts import names
from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc
from serving.recording.session_ids import REQUEST_ID_HEADER, header_value
from tests.serving.conftest import recorded_calls


def _plain_client(server, base: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_base + base, api_key="user-key", max_retries=0)


def test_a_call_without_headers_is_a_one_call_session_named_by_its_id(api_server):
    client = _plain_client(api_server)
    raw = client.chat.completions.with_raw_response.create(
        model="", messages=[{"role": "user", "content": "fix the file"}], max_tokens=3)
    reply = raw.parse()
    assert reply.id.startswith("chatcmpl-")
    assert raw.headers[REQUEST_ID_HEADER] == reply.id == raw.headers[names.META_SESSION_ID]
    assert reply.liverl["request_id"] == reply.id == reply.liverl["session_id"]
    assert raw.headers[names.META_POLICY_VERSION] == reply.liverl["policy_version"] == "1"

    text = client.completions.create(model="", prompt="search file", max_tokens=2)
    assert text.id.startswith("cmpl-") and text.model_extra["liverl"]["session_id"] == text.id

    calls = recorded_calls(api_server, {reply.id, text.id})
    for one in (reply.id, text.id):
        assert calls[one].session_id == one and calls[one].tenant_id == "acme"  # the key's tenant, always
    assert calls[reply.id].api == "openai-chat" and calls[text.id].api == "openai-completions"


def test_sessions_named_by_url_metadata_or_user_in_that_order(api_server):
    ask = [{"role": "user", "content": "ask"}]
    by_url = _plain_client(api_server, "/s/s-url/v1")
    named = {
        "s-url": by_url.chat.completions.create(model="", messages=ask, max_tokens=2),
        "s-meta": _plain_client(api_server).chat.completions.create(
            model="", messages=ask, max_tokens=2, metadata={"liverl_session_id": "s-meta"}, user="s-user"),
        "s-user": _plain_client(api_server).completions.create(model="", prompt="ask", max_tokens=2, user="s-user"),
        # the header beats the URL, the URL beats the body
        "s-header": by_url.with_options(default_headers={names.META_SESSION_ID: "s-header"}).chat.completions.create(
            model="", messages=ask, max_tokens=2, metadata={"liverl_session_id": "s-meta"}),
        "s-url-2": _plain_client(api_server, "/s/s-url-2/v1").chat.completions.create(
            model="", messages=ask, max_tokens=2, user="s-user"),
    }
    shown = {session: reply.model_extra["liverl"]["session_id"] for session, reply in named.items()}
    by_user = shown["s-user"]  # OpenAI's `user` names the session by its keyed pseudonym, never as given
    assert by_user.startswith("u-") and "s-user" not in by_user
    assert shown == {**{session: session for session in named}, "s-user": by_user}
    calls = recorded_calls(api_server, {reply.id for reply in named.values()})
    assert {session: calls[reply.id].session_id for session, reply in named.items()} == shown
    assert by_url.models.list().data[0].model_extra["policy_version"] == "1"  # the whole API under the URL


def test_a_session_id_holding_personal_data_is_recorded_and_keyed_by_its_pseudonym(api_server):
    reply = _plain_client(api_server).chat.completions.create(
        model="", messages=[{"role": "user", "content": "ask"}], max_tokens=2,
        metadata={"liverl_session_id": "conv-dave@example.com"})
    assert reply.model_extra["liverl"]["session_id"] == "conv-dave@example.com"  # the client's own id, to the client
    call = recorded_calls(api_server, {reply.id})[reply.id]  # its Kafka key checked against the value there
    assert call.session_id.startswith("redacted-email-") and "dave@example.com" not in call.SerializeToString().decode(
        errors="replace")


def test_streams_carry_the_ids_in_headers_and_every_chunk(api_server):
    client = _plain_client(api_server)
    with client.chat.completions.with_streaming_response.create(
            model="", messages=[{"role": "user", "content": "edit"}], max_tokens=3, stream=True) as response:
        session = response.headers[names.META_SESSION_ID]
        chunks = list(response.parse())
    assert {chunk.id for chunk in chunks} == {session} == {chunk.liverl["session_id"] for chunk in chunks}


def test_bad_session_names_are_refused_like_any_bad_field(api_server):
    base = api_server.http_base
    auth = {"authorization": "Bearer user-key"}
    chat = {"messages": [{"role": "user", "content": "ask"}], "max_tokens": 2}
    for body in ({**chat, "metadata": {"liverl_session_id": "x" * 300}}, {**chat, "user": "u" * 300},
                 {**chat, "metadata": {f"k{i}": "v" for i in range(17)}}):
        refused = httpx.post(base + "/v1/chat/completions", json=body, headers=auth)
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
    blank = httpx.post(base + "/s/%20/v1/chat/completions", json=chat, headers=auth)
    assert blank.status_code == 400 and "session" in blank.json()["error"]["message"]
    # an id that is printable but not ASCII travels percent-encoded in the header, as it is in the body
    ok = httpx.post(base + "/v1/chat/completions", json={**chat, "metadata": {"liverl_session_id": "séance-1"}},
                    headers=auth)
    assert ok.status_code == 200 and ok.json()["liverl"]["session_id"] == "séance-1"
    assert ok.headers[names.META_SESSION_ID] == header_value("séance-1") == "s%C3%A9ance-1"


def test_grpc_without_a_session_is_a_one_call_session_too(api_server):
    with grpc.insecure_channel(api_server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        response, call = stub.Generate.with_call(
            serving_pb2.GenerateRequest(prompt="fix the file", sampling=common_pb2.SamplingParams(max_tokens=2)),
            metadata=(("authorization", "Bearer user-key"),))
    metadata = dict(call.trailing_metadata())
    assert metadata[names.META_SESSION_ID] == metadata[REQUEST_ID_HEADER] == response.request_id
    assert response.session_id == response.request_id
    assert recorded_calls(api_server, {response.request_id})[response.request_id].session_id == response.request_id
