"""The HTTP JSON endpoint for products not written in Python.

    POST /v1/capture   Authorization: Bearer <tenant token>
    {"events": [{"eventId": "...", "sessionId": "...", "schemaVersion": 1, "eventTimeMs": 1700000000000,
                 "userMessage": {"text": "hi"}}]}

Events use the protobuf JSON mapping of liverl.v1.SessionEvent. Answers: 200 with the CaptureResponse
(per-event rejections inside), 400 bad body, 401 missing/wrong token, 403 wrong tenant, 408 body too slow,
413 too large (refused from Content-Length, or while streaming: a huge body is never read whole), 429 over the
tenant's rate limit and 503 not stored (both with Retry-After). GET /healthz and GET /metrics too.
"""

from __future__ import annotations

import asyncio
import json
import math

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ingest.admission import RateLimited
from ingest.auth import AuthError, TokenAuth
from ingest.capture import CaptureCore
from liverl.io.spool import SpoolFull
from ingest.validation import parse_json
from liverl.contracts import names

AUTH_STATUS = {"unauthenticated": 401, "permission_denied": 403}
KEPT_OF_REFUSED_BODY = 65536  # how much of a refused body its dead letter keeps


class BodyTooLarge(Exception):
    def __init__(self, head: bytes, size: int):
        super().__init__(f"{size} bytes and counting")
        self.head = head
        self.size = size


async def read_bounded(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk; raises BodyTooLarge as soon as it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(b"".join(chunks)[:KEPT_OF_REFUSED_BODY], size)
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(core: CaptureCore, auth: TokenAuth, max_batch_events: int, max_request_bytes: int) -> FastAPI:
    app = FastAPI(title="liverl capture", docs_url=None, redoc_url=None, openapi_url=None)

    def reject(status: int, reason: str, message: str, tenant: str, body: bytes) -> JSONResponse:
        try:
            core.reject_request(reason, message, tenant, body, api="http")
        except SpoolFull:
            pass
        return JSONResponse({"error": reason, "message": message}, status_code=status)

    @app.post("/v1/capture")
    async def capture(request: Request) -> Response:
        try:
            tenant = auth.tenant_of(request.headers.get("authorization"), request.headers.get(names.META_TENANT))
        except AuthError as error:
            core.refuse_caller(error.status, error.message, api="http", tenant=_token_tenant(auth, request))
            return JSONResponse({"error": error.status, "message": error.message},
                                status_code=AUTH_STATUS[error.status], headers={"WWW-Authenticate": "Bearer"})
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_request_bytes:  # refused unread
            return await run_in_threadpool(reject, 413, "too_large", f"the body is {declared} bytes; send at most "
                                           f"{max_request_bytes} (ingest.max_request_bytes)", tenant, b"")
        try:
            body = await asyncio.wait_for(read_bounded(request, max_request_bytes), core.handler_timeout_s)
        except BodyTooLarge as error:
            return await run_in_threadpool(reject, 413, "too_large", f"the body passed {max_request_bytes} bytes "
                                           "(ingest.max_request_bytes); send smaller batches", tenant, error.head)
        except asyncio.TimeoutError:
            return await run_in_threadpool(reject, 408, "body_timeout", "the body did not arrive within "
                                           f"{core.handler_timeout_s:g} s (ingest.handler_timeout_s)", tenant, b"")
        try:
            document = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            return await run_in_threadpool(reject, 400, "invalid_utf8", "the body is not valid UTF-8", tenant, body)
        except (json.JSONDecodeError, RecursionError) as error:
            return await run_in_threadpool(reject, 400, "invalid_json", f"the body is not JSON: {error}", tenant,
                                           body)
        events = document.get("events") if isinstance(document, dict) else None
        if not isinstance(events, list):
            return await run_in_threadpool(reject, 400, "wrong_type", 'the body must be {"events": [...]}', tenant,
                                           body)
        if len(events) > max_batch_events:
            return await run_in_threadpool(reject, 413, "too_many_events", f"{len(events)} events; send at most "
                                           f"{max_batch_events} (ingest.max_batch_events)", tenant, body[:65536])
        try:
            core.rate_limiter.take(tenant, len(events))
        except RateLimited as error:
            core.refuse_caller("rate_limited", str(error), api="http", tenant=tenant)
            return JSONResponse({"error": "rate_limited", "message": str(error)}, status_code=429,
                                headers={"Retry-After": str(max(1, math.ceil(error.retry_after_s)))})
        try:
            response = await run_in_threadpool(core.capture, tenant, events, parse_json, "http")
        except SpoolFull as error:
            return JSONResponse({"error": "unavailable", "message": f"not stored, retry later: {error}"},
                                status_code=503, headers={"Retry-After": "5"})
        return JSONResponse(json_format.MessageToDict(response, always_print_fields_with_no_presence=True))

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok", "kafka_direct": core.delivery.direct()}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(core.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _token_tenant(auth: TokenAuth, request: Request) -> str:
    """The token's own tenant, for counting a cross-tenant attempt ("" when the token is no tenant's)."""
    try:
        return auth.tenant_of(request.headers.get("authorization"))
    except AuthError:
        return ""
