"""The completion routes as plain ASGI, in front of the FastAPI app that serves the rest of the HTTP API.

POST /v1/completions, /v1/chat/completions, /v1/responses and their per-session forms /s/<session_id>/v1/... carry
nearly all the traffic, and FastAPI's middleware, routing, dependency solving and Request objects cost
more of the event loop than the guards and handlers themselves (bench/http_layer_bench.py). So they are
matched here, by path, with the headers decoded once from the scope; the guards of serving.http.guard run in their
order (key -> rate limit -> caller headers -> body under the cap and deadline -> strict parse, in the
handler) and the reply is written with `send`. What FastAPI answered on these paths is kept: 405 with
Allow: POST for another method, a 307 to the path without its trailing slash, OpenAI-shaped errors,
a 500 with a fixed body for anything unexpected. Every other path passes to the FastAPI app.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from starlette.datastructures import URL
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from liverl.redaction.error_log import log_unexpected
from serving.auth import Principal
from serving.generation import Caller
from serving.http.completions import Reply, chat, complete
from serving.http.guard import (
    UNEXPECTED_ERROR,
    ApiError,
    Body,
    ClientLeft,
    HttpContext,
    authenticate,
    identify_caller,
    log,
    read_json_body,
)

Handler = Callable[[HttpContext, Principal, Caller, Body], Awaitable[Reply]]
ROUTES: dict[str, Handler] = {"/v1/completions": complete, "/v1/chat/completions": chat}
RESPONSES_PATH = "/v1/responses"  # its handler holds the app's kept responses: added per app (CompletionRoutes)
SESSION_PREFIX = "/s/"  # /s/<session_id>/v1/...: the per-session base URL (serving.recording.session_ids)

JSON = (b"content-type", b"application/json")
EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")
METHOD_NOT_ALLOWED = b'{"detail":"Method Not Allowed"}'  # FastAPI's own 405 body


def match(path: str, routes: dict[str, Handler] = ROUTES) -> tuple[Handler, str] | None:
    """The handler of a completion path and the session its URL names ("" for none); None for other paths."""
    handler = routes.get(path)
    if handler is not None:
        return handler, ""
    if path.startswith(SESSION_PREFIX):
        session, slash, rest = path[len(SESSION_PREFIX):].partition("/")
        handler = routes.get("/" + rest) if session and slash else None
        if handler is not None:
            return handler, session
    return None


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers, decoded once: ASGI's lower-case names, the first value of a repeated header
    (what Starlette's Headers.get gives)."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1")
        if key not in headers:
            headers[key] = value.decode("latin-1")
    return headers


class CompletionRoutes:
    """The ASGI app uvicorn serves: the completion routes here (with `responses`, POST /v1/responses),
    everything else to `fallback`."""

    def __init__(self, ctx: HttpContext, fallback: ASGIApp, responses: Handler | None = None):
        self.ctx = ctx
        self.fallback = fallback
        self.routes = {**ROUTES, RESPONSES_PATH: responses} if responses is not None else ROUTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.fallback(scope, receive, send)
        path = scope["path"]
        route = match(path, self.routes)
        if route is None:
            if path != "/" and path.endswith("/") and match(path.rstrip("/"), self.routes) is not None:
                url = URL(scope={**scope, "path": path.rstrip("/")})  # as Starlette's redirect_slashes does
                return await RedirectResponse(str(url))(scope, receive, send)
            return await self.fallback(scope, receive, send)
        if scope["method"] != "POST":
            return await _send_json(send, 405, METHOD_NOT_ALLOWED, [(b"allow", b"POST")])
        try:
            reply = await self._answer(route, scope, receive)
            content = orjson.dumps(reply.payload) if reply.events is None else b""  # a failure here is still a 500
        except ApiError as error:
            return await _send_json(send, error.status, orjson.dumps(error.payload()), _raw(error.headers))
        except Exception as error:  # a bug met on this request: logged without the request's values
            log_unexpected(log, f"unexpected error serving {path}", error)
            return await _send_json(send, 500, orjson.dumps(UNEXPECTED_ERROR), [])
        if reply.events is None:
            await _send_json(send, 200, content, _raw(reply.headers))
        else:
            await _send_events(reply, receive, send)

    async def _answer(self, route: tuple[Handler, str], scope: Scope, receive: Receive) -> Reply:
        handler, path_session = route
        ctx, headers = self.ctx, request_headers(scope)
        principal = authenticate(ctx, headers.get("authorization"))
        who = identify_caller(ctx, principal, headers, path_session)
        body = await read_json_body(ctx, principal, headers.get("content-length"), _body_chunks(receive))
        return await handler(ctx, principal, who, body)


async def _body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft()
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _send_json(send: Send, status: int, content: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", b"%d" % len(content)), JSON]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _send_events(reply: Reply, receive: Receive, send: Send) -> None:
    """The SSE events until [DONE]. A client that leaves first stops the stream and frees the call's lease at
    once: uvicorn's send does not fail for a gone client, so its receive is watched for http.disconnect."""
    stream = asyncio.ensure_future(_stream(reply, send))
    left = asyncio.ensure_future(_disconnected(receive))
    try:
        done, _ = await asyncio.wait((stream, left), return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
        stream.cancel()
        reply.call.close()
    if stream in done:
        stream.result()  # the stream's own error, if it failed: uvicorn logs it and drops the connection


async def _stream(reply: Reply, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [*_raw(reply.headers), EVENT_STREAM]})
    async for event in reply.events:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _raw(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()] if headers else []
