"""The completion routes' ASGI front (serving.http.asgi_routes): what FastAPI answered is kept, the guards run in
their order, and a stream's lease is freed when its client leaves.

Some tests call the front in-process with an ASGI receive/send pair (to see what is read, and when) on
the running server's loop and context; the others go through uvicorn on a socket.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import httpx
import orjson
import pytest

from liverl.contracts import names
from serving.http.api import build_http_app
from serving.http.asgi_routes import match, request_headers
from serving.http.completions import chat, complete
from serving.http.guard import HttpContext
from serving.http.responses.state import ResponseStore
from serving.rate_limit import RateLimiter
from tests.serving.conftest import rejected_total

ACME = [(b"authorization", b"Bearer acme-key")]
PATHS = ["/v1/completions", "/v1/chat/completions", "/s/s-1/v1/completions", "/s/s-1/v1/chat/completions"]


class Exchange:
    """One request through an ASGI app, in memory: the body in `chunks`, then receive waits until the
    response is complete (or answers http.disconnect at once when `leave_after_events` events were sent)."""

    def __init__(self, body: bytes = b"", chunks: list[bytes] | None = None, leave_after_events: int | None = None):
        self.chunks = list(chunks) if chunks is not None else [body]
        self.leave_after_events = leave_after_events
        self.receives = 0
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.parts: list[bytes] = []
        self.complete = False
        self._changed: asyncio.Event | None = None

    async def run(self, app, path: str, headers: list[tuple[bytes, bytes]], method: str = "POST") -> "Exchange":
        self._changed = asyncio.Event()
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": b"", "headers": headers, "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 8000), "state": {}}
        await app(scope, self.receive, self.send)
        return self

    async def receive(self) -> dict:
        self.receives += 1
        if self.chunks:
            chunk = self.chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}
        while not (self.complete or self._leaving()):
            self._changed.clear()
            await self._changed.wait()
        return {"type": "http.disconnect"}

    def _leaving(self) -> bool:
        return self.leave_after_events is not None and len(self.parts) >= self.leave_after_events

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status, self.headers = message["status"], dict(message["headers"])
        else:
            if message.get("body"):
                self.parts.append(message["body"])
            self.complete = not message.get("more_body", False)
        self._changed.set()

    def json(self) -> dict:
        return orjson.loads(b"".join(self.parts))


def _front(server, **changes):
    """The front served by `server`, built anew over its parts (with `changes` to the HttpContext)."""
    s, c = server.server, server.server.config.serving
    ctx = HttpContext(s.completions, s.model_info, s.rollout, s.keys, s.limiter, c.max_request_bytes,
                      c.body_timeout_s, s.engine_failure)
    for key, value in changes.items():
        setattr(ctx, key, value)
    return build_http_app(ctx, ResponseStore.from_config(c))


def _json_headers(body: bytes, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [*ACME, (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra]


def test_the_four_completion_paths_are_matched_and_nothing_else():
    assert match("/v1/completions") == (complete, "")
    assert match("/v1/chat/completions") == (chat, "")
    assert match("/s/s-1/v1/completions") == (complete, "s-1")
    assert match("/s/ /v1/chat/completions") == (chat, " ")  # a blank session is refused by the guard, as before
    for other in ("/v1/models", "/s/s-1/v1/models", "/v1/completions/", "/s//v1/completions",
                  "/s/a/b/v1/completions", "/v2/completions", "/health", "/admin/swap", "/s/v1/completions"):
        assert match(other) is None, other


def test_headers_are_decoded_once_and_the_first_of_a_repeated_one_counts():
    scope = {"headers": [(b"authorization", b"Bearer a"), (b"x-liverl-agent-role", b"subagent"),
                         (b"authorization", b"Bearer b"), (b"x-liverl-tenant", "café".encode("latin-1"))]}
    assert request_headers(scope) == {"authorization": "Bearer a", "x-liverl-agent-role": "subagent",
                                      "x-liverl-tenant": "café"}


class CountedHeaders(list):
    """The scope's header list, counting how often it is walked."""

    walks = 0

    def __iter__(self):
        CountedHeaders.walks += 1
        return super().__iter__()


def test_a_served_request_walks_the_scope_headers_once(hostile_server):
    body = b'{"prompt": "fix the file", "max_tokens": 2}'
    CountedHeaders.walks = 0
    headers = CountedHeaders(_json_headers(body, (names.META_SESSION_ID.encode(), b"s-once"),
                                          (names.META_AGENT_ROLE.encode(), b"orchestrator")))
    served = hostile_server.call(Exchange(body).run(_front(hostile_server), "/v1/completions", headers))
    assert served.status == 200 and served.json()["liverl"]["session_id"] == "s-once"
    assert CountedHeaders.walks == 1
    assert served.headers[b"content-type"] == b"application/json"
    assert served.headers[names.META_SESSION_ID.encode()] == b"s-once"
    assert served.headers[b"x-liverl-request-id"] == served.json()["id"].encode()
    assert served.headers[names.META_POLICY_VERSION.encode()] == b"local"


def test_a_declared_body_over_the_cap_is_refused_before_it_is_read(hostile_server):
    cap = hostile_server.server.config.serving.max_request_bytes
    before = rejected_total(hostile_server)
    too_big = Exchange(b"x" * 100)
    headers = [*ACME, (b"content-length", b"%d" % (cap + 1))]
    hostile_server.call(too_big.run(_front(hostile_server), "/v1/completions", headers))
    assert too_big.status == 413 and too_big.json()["error"]["code"] == "too-large"
    assert too_big.receives == 0  # not one byte of the body was asked for
    assert rejected_total(hostile_server) == before + 1


def test_a_chunked_body_stops_being_read_at_the_cap(hostile_server):
    front = _front(hostile_server, max_request_bytes=4096)
    chunks = [b"x" * 1024] * 50
    refused = hostile_server.call(Exchange(chunks=chunks).run(front, "/v1/completions", ACME))
    assert refused.status == 413 and refused.receives == 5  # 5 KiB read: over the cap, the other 45 never asked for


def test_the_guards_run_key_then_caller_then_body(hostile_server, client):
    bad_everything = {"authorization": "Bearer nope", names.META_AGENT_ROLE: "boss", "content-type": "application/json"}
    assert client.post("/v1/completions", content=b"{", headers=bad_everything).status_code == 401
    bad_role = client.post("/v1/completions", content=b"{", headers={**bad_everything,
                                                                      "authorization": "Bearer acme-key"})
    assert bad_role.status_code == 400 and bad_role.json()["error"]["code"] == "bad-agent-role"
    bad_json = client.post("/s/s-1/v1/chat/completions", content=b"{", headers={"authorization": "Bearer acme-key"})
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "bad-json"


def test_an_api_key_over_its_rate_limit_gets_429_with_retry_after(hostile_server):
    front = _front(hostile_server, limiter=RateLimiter(0.01, 1))
    body = b'{"prompt": "fix", "max_tokens": 1}'
    first = hostile_server.call(Exchange(body).run(front, "/v1/completions", _json_headers(body)))
    second = hostile_server.call(Exchange(body).run(front, "/v1/completions", _json_headers(body)))
    assert first.status == 200
    assert second.status == 429 and second.json()["error"]["type"] == "rate_limit_error"
    assert int(second.headers[b"retry-after"]) >= 1
    assert second.receives == 0


def test_an_unexpected_error_is_logged_without_its_values_and_answered_500(hostile_server, caplog):
    class BrokenTransport(Exchange):
        async def receive(self):
            raise RuntimeError("the transport broke on bob@example.com")

    with caplog.at_level(logging.ERROR, logger="liverl.serving.http"):
        failed = hostile_server.call(BrokenTransport(b"{}").run(_front(hostile_server), "/v1/completions", ACME))
    assert failed.status == 500
    assert failed.json() == {"error": {"message": "internal error: the server logged it", "type": "server_error",
                                       "param": None, "code": None}}
    assert "unexpected error serving /v1/completions" in caplog.text and "the transport broke" in caplog.text
    assert "bob@example.com" not in caplog.text and "Traceback" not in caplog.text  # a traceback quotes the value


def test_a_client_leaving_mid_stream_frees_the_lease_at_once(hostile_server):
    server = hostile_server.server
    slot = server.router.champion
    errors = {"version": slot.version, "api": "openai-completions", "outcome": "error"}
    before = server.metrics.value("liverl_serving_requests_total", errors)
    body = b'{"prompt": "fix the file", "max_tokens": 500, "stream": true, "seed": 3}'
    started = time.monotonic()
    left = hostile_server.call(Exchange(body, leave_after_events=1).run(_front(hostile_server), "/v1/completions",
                                                                        _json_headers(body)))
    assert left.status == 200 and left.headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    # it stopped long before its 500 tokens; how many went out first depends on the machine's load
    assert 1 <= len(left.parts) < 50 and not left.complete and b"[DONE]" not in b"".join(left.parts)
    assert slot.in_flight == 0  # released before the front returned, not when the stream is collected
    assert server.metrics.value("liverl_serving_requests_total", errors) == before + 1  # closed unfinished
    assert time.monotonic() - started < 5


def test_a_socket_closed_mid_stream_frees_the_lease(hostile_server):
    server = hostile_server.server
    slot = server.router.champion
    errors = {"version": slot.version, "api": "openai-chat", "outcome": "error"}
    before = server.metrics.value("liverl_serving_requests_total", errors)
    body = orjson.dumps({"messages": [{"role": "user", "content": "fix"}], "max_tokens": 500, "stream": True,
                         "seed": 5})
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer acme-key\r\n"
                     b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        reply = b""
        while b"data: " not in reply:
            reply += sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 10
    while slot.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slot.in_flight == 0
    assert server.metrics.value("liverl_serving_requests_total", errors) == before + 1


@pytest.fixture(scope="module")
def client(hostile_server):
    with httpx.Client(base_url=hostile_server.http_base, timeout=60) as c:
        yield c


def test_other_methods_are_405_as_fastapi_answered(hostile_server, client):
    before = rejected_total(hostile_server)
    for path in PATHS:
        for method in ("GET", "PUT", "DELETE", "OPTIONS", "HEAD"):
            response = client.request(method, path, headers={"authorization": "Bearer acme-key"})
            assert response.status_code == 405 and response.headers["allow"] == "POST", (method, path)
            if method != "HEAD":
                assert response.json() == {"detail": "Method Not Allowed"}
    assert rejected_total(hostile_server) == before  # routing refuses before any guard runs


def test_other_paths_fall_through_to_fastapi(client):
    assert client.post("/v1/nothing", json={}, headers={"authorization": "Bearer acme-key"}).status_code == 404
    assert client.post("/s//v1/completions", json={}).json() == {"detail": "Not Found"}
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/s/s-1/v1/models", headers={"authorization": "Bearer acme-key"}).status_code == 200
    assert client.get("/v1/models").status_code == 401
    assert client.post("/admin/rollback", json={}, headers={"authorization": "Bearer acme-key"}).status_code == 401
    moved = client.post("/s/s-1/v1/completions/", json={})
    assert moved.status_code == 307 and moved.headers["location"].endswith("/s/s-1/v1/completions")
