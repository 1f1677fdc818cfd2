"""Hostile and careless clients against a running server's HTTP API (the light engine, loopback only).

Each request body is built field by field from values known to be inside or outside the contract, so
the expected outcome is known: valid bodies are served, every invalid one is refused with an
OpenAI-shaped 4xx error and counted, and nothing yields a 5xx or kills the server.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liverl.contracts import names
from liverl.contracts.refused_request import RefusedRequest
from tests.serving.conftest import read_topic, rejected_total

SECRET = "sk-live-0123456789abcdef0123456789abcdef"  # must never reach the dead-letter topic
ACME = {"authorization": "Bearer acme-key"}
OMIT = object()
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
COUNTS = {"tried": 0, "rejected": 0, "served": 0}

# (value, inside the contract?) per field, or (value, a check of the whole body) for a value valid only beside
# another; OMIT leaves the field out.
COMMON = {
    "max_tokens": [(OMIT, True), (None, True), (1, True), (6, True), (0, False), (-1, False), (2**31, False),
                   (2**63, False), (8.0, False), ("5", False), (True, False), (100_000, False)],
    "temperature": [(OMIT, True), (0, True), (0.7, True), (1, True), (2.0, True), (0.01, True), (-0.1, False), (2.01, False),
                    (0.005, False), ("1", False), (True, False)],
    "top_p": [(OMIT, True), (0.3, True), (1.0, True), (0, False), (-1.0, False), (1.5, False), ("x", False)],
    "top_k": [(OMIT, True), (-1, True), (0, True), (3, True), (2**31 - 1, True), (-2, False), (2**31, False),
              (1.5, False), ("3", False)],
    "seed": [(OMIT, True), (0, True), (7, True), (-5, True), (2**63 - 1, True), (2**63, False), (1.5, False),
             ("1", False)],
    "stop": [(OMIT, True), ("done", True), (["fix", "ask"], True), ([], True), ("", False), (["a"] * 5, False),
             ([1], False), (5, False)],
    "n": [(OMIT, True), (1, True), (2, False), (0, False), ("1", False)],
    "stream": [(OMIT, True), (False, True), (True, True), ("yes", False), (1, False)],
    "presence_penalty": [(OMIT, True), (0, True), (0.5, False)],
    "min_p": [(OMIT, True), (0, True), (0.05, False)],
    "repetition_penalty": [(OMIT, True), (1, True), (1.2, False)],
    "user": [(OMIT, True), ("someone", True), ({"any": ["thing"]}, True)],  # unknown fields are ignored
}
COMPLETION = {
    "prompt": [(f"fix the file {SECRET}", True), ([2, 60, 61], True), (["search file"], True), ([[5, 6]], True),
               ("", False), ("   ", False), ([], False), (["a", "b"], False), ([-1], False), ([10**6], False),
               (5, False), (None, False), ({"x": 1}, False), ("fix " * 600, False), (OMIT, False)],
    "logprobs": [(OMIT, True), (0, True), (5, True), (6, False), (-1, False), (True, False)],
}
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]


def _with_tools(body: dict) -> bool:
    """A forced tool_choice is inside the contract only beside tools to call."""
    return "tools" in body


CHAT = {
    "messages": [([{"role": "user", "content": f"fix file {SECRET}"}], True),
                 ([{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text",
                                                                                         "text": "ask"}]}], True),
                 ([{"role": "user", "content": "fix"}, {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "done"}], True),
                 ([], False), ([{"role": "boss", "content": "x"}], False), ([{"content": "x"}], False),
                 ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], False),
                 ("hello", False), ([5], False), ([{"role": "user", "content": 5}], False), (OMIT, False)],
    "tools": [(OMIT, True), (TOOLS, True), ([1], False), ([{"function": 5}], False),
              ([{"type": "function", "function": {"name": "bad name!"}}], False), ({"a": 1}, False)],
    "tool_choice": [(OMIT, True), ("auto", True), ("none", True), ("sometimes", False), (5, False),
                    ("required", _with_tools), ({"type": "function", "function": {"name": "edit"}}, _with_tools),
                    ({"type": "function", "function": {"name": "search"}}, False),
                    ({"type": "function", "function": {"name": 5}}, False)],
    "max_completion_tokens": [(OMIT, True), (2, True), (0, False), (2**40, False)],
    "logprobs": [(OMIT, True), (True, True), (False, True), ("yes", False)],
}
EDIT_TOOL = {"type": "function", "name": "edit", "parameters": {"type": "object"}}
RESPONSES = {
    "input": [(f"fix file {SECRET}", True), ([{"role": "user", "content": "fix"}], True),
              ([{"role": "user", "content": [{"type": "input_text", "text": "ask"}]}], True),
              ([{"role": "user", "content": "fix"}, {"type": "function_call", "call_id": "c1", "name": "edit",
                                                     "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]}],
               True),
              ([], False), ([{"type": "function_call_output", "call_id": "nobody", "output": "x"}], False),
              ([{"type": "web_search_call", "id": "w", "status": "completed"}], False),
              ([{"type": "item_reference", "id": "msg_1"}], False), ([{"type": "reasoning", "summary": []}], False),
              ([{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}], False),
              ([{"role": "boss", "content": "x"}], False), ([{"role": "user"}], False), ([5], False), (5, False),
              (None, False), ("fix " * 600, False), (OMIT, False)],
    "instructions": [(OMIT, True), ("be brief", True), (None, True), (5, False)],
    "tools": [(OMIT, True), ([EDIT_TOOL], True), ([{"type": "web_search"}], False),
              ([{"type": "file_search", "vector_store_ids": ["v"]}], False),
              ([{"type": "function", "name": "bad name!"}], False), ([TOOLS[0]], False), ({"a": 1}, False)],
    "tool_choice": [(OMIT, True), ("auto", True), ("none", True), ("required", _with_tools),
                    ({"type": "function", "name": "edit"}, _with_tools),
                    ({"type": "function", "name": "search"}, False), ({"type": "function", "name": None}, False),
                    ("sometimes", False)],
    "max_output_tokens": [(OMIT, True), (None, True), (2, True), (0, False), (2**40, False), ("3", False)],
    "temperature": [(OMIT, True), (0, True), (1.0, True), (2.5, False), ("1", False)],
    "top_p": [(OMIT, True), (0.5, True), (0, False)],
    "stream": [(OMIT, True), (True, True), (False, True), ("yes", False)],
    "user": [(OMIT, True), ("someone", True), ({"any": ["thing"]}, True)],
    "metadata": [(OMIT, True), ({"liverl_session_id": "s-r"}, True), ({"k": 5}, False)],
    "previous_response_id": [(OMIT, True), ("resp_unknown", False), (5, False)],
    "background": [(OMIT, True), (False, True), (True, False)],
    "reasoning": [(OMIT, True), (None, True), ({"effort": "low"}, False)],
    "include": [(OMIT, True), (["message.output_text.logprobs"], True), (["reasoning.encrypted_content"], False)],
    "store": [(OMIT, True), (False, True), (True, True), ("no", False)],
    "text": [(OMIT, True), ({"format": {"type": "text"}}, True), ({"format": {"type": "json_object"}}, False)],
}
HEADERS = {
    names.META_AGENT_ROLE: [(OMIT, True), ("orchestrator", True), ("subagent", True), ("boss", False)],
    names.META_SESSION_ID: [(OMIT, True), ("s-hostile", True), ("x" * 300, False)],
    names.META_TENANT: [(OMIT, True), ("acme", True)],
}


def _pick(table: dict) -> st.SearchStrategy:
    """Half the draws use only valid values (so valid requests are common), half use any value."""
    valid = {field: st.sampled_from([c for c in choices if c[1]]) for field, choices in table.items()
             if any(ok for _, ok in choices)}
    return st.one_of(st.fixed_dictionaries(valid),
                     st.fixed_dictionaries({field: st.sampled_from(choices) for field, choices in table.items()}))


def _assemble(picked: dict) -> tuple[dict, bool]:
    body = {k: v for k, (v, _) in picked.items() if v is not OMIT}
    return body, all(ok(body) if callable(ok) else ok for _, ok in picked.values())


def _check(server, client: httpx.Client, path: str, body: dict, headers: dict, valid: bool) -> None:
    before = rejected_total(server)
    response = client.post(path, content=json.dumps(body), headers={**ACME, **headers})
    COUNTS["tried"] += 1
    assert response.status_code < 500, (body, headers, response.text)
    if valid:
        COUNTS["served"] += 1
        assert response.status_code == 200, (body, headers, response.text)
        assert response.headers[names.META_POLICY_VERSION] == "local"
        if body.get("stream") and path == "/v1/responses":
            assert "event: response.completed" in response.text or "event: response.incomplete" in response.text
        elif body.get("stream"):
            assert response.text.rstrip().endswith("data: [DONE]")
        elif path == "/v1/responses":
            assert response.json()["usage"]["output_tokens"] >= 1
        else:
            assert response.json()["usage"]["completion_tokens"] >= 1
        assert rejected_total(server) == before
    else:
        COUNTS["rejected"] += 1
        assert response.status_code in (400, 404), (body, headers, response.text)
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"] and error["code"]
        assert rejected_total(server) == before + 1


@pytest.fixture(scope="module")
def client(hostile_server):
    with httpx.Client(base_url=hostile_server.http_base, timeout=60) as c:
        yield c


@SETTINGS
@given(fields=_pick({**COMMON, **COMPLETION}), headers=_pick(HEADERS))
def test_completions_serve_the_valid_and_refuse_the_invalid(hostile_server, client, fields, headers):
    body, body_ok = _assemble(fields)
    head, head_ok = _assemble(headers)
    _check(hostile_server, client, "/v1/completions", body, head, body_ok and head_ok)


@SETTINGS
@given(fields=_pick({**COMMON, **CHAT}), headers=_pick(HEADERS))
def test_chat_serves_the_valid_and_refuses_the_invalid(hostile_server, client, fields, headers):
    body, body_ok = _assemble(fields)
    head, head_ok = _assemble(headers)
    _check(hostile_server, client, "/v1/chat/completions", body, head, body_ok and head_ok)


@SETTINGS
@given(fields=_pick(RESPONSES), headers=_pick(HEADERS))
def test_responses_serve_the_valid_and_refuse_the_invalid(hostile_server, client, fields, headers):
    body, body_ok = _assemble(fields)
    head, head_ok = _assemble(headers)
    _check(hostile_server, client, "/v1/responses", body, head, body_ok and head_ok)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=30), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)
FIELD_NAMES = st.sampled_from(["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "seed",
                               "stop", "n", "stream", "tools", "tool_choice", "logprobs", "x", "input", "instructions",
                               "max_output_tokens", "previous_response_id", "include", "text", "reasoning"])


@SETTINGS
@given(path=st.sampled_from(["/v1/completions", "/v1/chat/completions", "/v1/responses", "/admin/rollback"]),
       body=st.one_of(st.dictionaries(FIELD_NAMES, JSON, max_size=6).map(lambda d: json.dumps(d).encode()),
                      st.binary(max_size=200), JSON.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bodies_never_yield_a_server_error(hostile_server, client, path, body):
    before = rejected_total(hostile_server)
    headers = {"authorization": "Bearer admin-key"} if path.startswith("/admin") else ACME
    response = client.post(path, content=body, headers=headers)
    COUNTS["tried"] += 1
    assert response.status_code < 500, (body, response.text)
    if response.status_code == 200:
        COUNTS["served"] += 1
    else:
        COUNTS["rejected"] += 1
        assert response.json()["error"]["message"] and rejected_total(hostile_server) == before + 1


def test_the_server_survived_and_no_secret_reached_the_dead_letters(hostile_server, client):
    assert client.get("/health").json()["status"] == "ok"
    config = hostile_server.server.config
    assert hostile_server.server.recorder.flush(30)
    letters = read_topic(config, config.kafka.dead_letters_topic, expect=10**6, timeout_s=10)
    assert letters, "invalid requests of authenticated callers are dead-lettered"
    assert not [r for r in letters if SECRET.encode() in r.value or b"sk-live" in r.value]
    envelopes = [json.loads(r.value) for r in letters]  # the topic may hold other suites' (gRPC) letters too
    payloads = [RefusedRequest.decode(base64.b64decode(e["payload_b64"])) for e in envelopes]  # summaries, no content
    assert all(p.reason == e["reason"] for p, e in zip(payloads, envelopes))
    assert "http" in {p.api for p in payloads}
    print(f"\nhostile HTTP suite: {COUNTS['tried']} cases tried, {COUNTS['rejected']} rejected, "
          f"{COUNTS['served']} served")


# -- tenancy, auth before the body, limits --------------------------------------------------------------


def test_a_key_cannot_record_calls_as_another_tenant(hostile_server, client):
    metrics = hostile_server.server.metrics
    before = metrics.value("liverl_serving_cross_tenant_refusals_total", {"tenant": "acme"})
    body = {"prompt": "fix", "max_tokens": 2}
    other = client.post("/v1/completions", json=body, headers={**ACME, names.META_TENANT: "globex"})
    own = client.post("/v1/completions", json=body, headers={"authorization": "Bearer globex-key",
                                                             names.META_TENANT: "globex"})
    narrowed = client.post("/v1/completions", json=body, headers={"authorization": "Bearer acme-sub-key",
                                                                  names.META_AGENT_ROLE: "orchestrator"})
    assert other.status_code == 403 and other.json()["error"]["code"] == "cross-tenant"
    assert own.status_code == 200
    assert narrowed.status_code == 403 and narrowed.json()["error"]["code"] == "forbidden-role"
    assert metrics.value("liverl_serving_cross_tenant_refusals_total", {"tenant": "acme"}) == before + 1


def test_a_key_cannot_continue_another_tenants_response(hostile_server, client):
    made = client.post("/v1/responses", json={"input": "fix", "max_output_tokens": 1}, headers=ACME)
    assert made.status_code == 200
    before = rejected_total(hostile_server)
    taken = client.post("/v1/responses", json={"input": "ask", "previous_response_id": made.json()["id"]},
                        headers={"authorization": "Bearer globex-key"})
    assert taken.status_code == 404 and taken.json()["error"]["code"] == "unknown-previous-response"
    assert rejected_total(hostile_server) == before + 1
    own = client.post("/v1/responses", json={"input": "ask", "previous_response_id": made.json()["id"],
                                             "max_output_tokens": 1}, headers=ACME)
    assert own.status_code == 200 and own.headers[names.META_SESSION_ID] == made.headers[names.META_SESSION_ID]


def _raw_post(server, path: str, headers: dict[str, str], body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10)
    head = "".join(f"{k}: {v}\r\n" for k, v in {"host": "127.0.0.1", **headers}.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + body)
    return sock


def _status(sock: socket.socket) -> int:
    reply = b""
    while b"\r\n" not in reply:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    return int(reply.split(b" ")[1])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/responses"])
def test_the_key_is_checked_before_the_body_is_read(hostile_server, path):
    metrics = hostile_server.server.metrics
    letters_before = sum(s.value for m in metrics.registry.collect() if m.name == "liverl_serving_dead_letters"
                         for s in m.samples if s.name.endswith("_total"))
    forty_mb = str(40 << 20)
    with _raw_post(hostile_server, path, {"content-length": forty_mb}) as no_key:
        assert _status(no_key) == 401  # answered with the body unsent
    with _raw_post(hostile_server, path, {"content-length": forty_mb, **ACME}) as too_big:
        assert _status(too_big) == 413
    letters_after = sum(s.value for m in metrics.registry.collect() if m.name == "liverl_serving_dead_letters"
                        for s in m.samples if s.name.endswith("_total"))
    assert letters_after == letters_before + 1  # the authenticated one only


def test_a_chunked_40_mb_body_is_refused_without_being_read_whole(hostile_server):
    sock = _raw_post(hostile_server, "/v1/completions", {"transfer-encoding": "chunked", **ACME})
    chunk = b"x" * (256 << 10)
    sent, answered = 0, []
    reader = threading.Thread(target=lambda: answered.append(_status(sock)), daemon=True)
    reader.start()
    try:
        while sent < (40 << 20) and not answered:
            sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            sent += len(chunk)
    except OSError:
        pass  # the server closed the connection: the rest was never read
    reader.join(10)
    sock.close()
    assert answered == [413]
    assert sent < (40 << 20)


def test_a_slow_body_is_cut_off(hostile_server):
    with _raw_post(hostile_server, "/v1/completions", {"content-length": "100", **ACME}, b'{"prompt"') as slow:
        started = time.monotonic()
        assert _status(slow) == 408
    assert time.monotonic() - started < 10


def test_a_megabyte_prompt_does_not_stall_health_checks(hostile_server, client):
    prompt = "fix the file " * 120_000  # ~1.5 MB, tokenized on a worker thread, then refused as too long
    result = {}
    worker = threading.Thread(target=lambda: result.update(r=client.post(
        "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, headers=ACME)))
    worker.start()
    slowest = 0.0
    with httpx.Client(base_url=hostile_server.http_base, timeout=10) as probe:
        while worker.is_alive():
            started = time.monotonic()
            assert probe.get("/health").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
    worker.join()
    assert result["r"].status_code == 400 and result["r"].json()["error"]["code"] == "too-long"
    assert slowest < 1.0
