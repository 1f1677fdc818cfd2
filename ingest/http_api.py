"""The HTTP JSON endpoint for products not written in Python.

    POST /v1/capture   Authorization: Bearer <tenant token>
    {"events": [{"eventId": "...", "sessionId": "...", "schemaVersion": 1, "eventTimeMs": 1700000000000,
                 "userMessage": {"text": "hi"}}]}

Events use the protobuf JSON mapping of liverl.v1.SessionEvent. Answers: 200 with the CaptureResponse
(per-event rejections inside), 400 bad body, 401 missing/wrong token, 403 wrong tenant, 408 body too slow,
413 too large (refused from Content-Length, or while streaming: a huge body is never read whole), 429 over the
tenant's rate limit and 503 not stored (both with Retry-After). GET /healthz and GET /metrics too.

    POST /v1/traces    OTLP/HTTP (JSON or protobuf) GenAI spans, same token and statuses (ingest/otlp_api.py)
"""

from __future__ import annotations

import asyncio
import json
import math
import zlib
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ingest.admission import RateLimited
from ingest.auth import AuthError, TokenAuth
from ingest.capture import CaptureCore
from ingest.otlp_api import NotConfigured, NotOtlp, OtlpTraces, json_response, protobuf_document, protobuf_response
from liverl.io.spool import SpoolFull
from ingest.validation import parse_json
from liverl.contracts import names

AUTH_STATUS = {"unauthenticated": 401, "permission_denied": 403}
PROTOBUF = "application/x-protobuf"
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


def build_app(core: CaptureCore, auth: TokenAuth, max_batch_events: int, max_request_bytes: int,
              tokenizer_dir: Path | None = None) -> FastAPI:
    """tokenizer_dir: the policy's Hugging Face folder, which /v1/traces rebuilds token ids with (None: it
    answers 501)."""
    app = FastAPI(title="liverl capture", docs_url=None, redoc_url=None, openapi_url=None)
    traces = OtlpTraces(core, tokenizer_dir)

    def reject(status: int, reason: str, message: str, tenant: str, body: bytes) -> JSONResponse:
        try:
            core.reject_request(reason, message, tenant, body, api="http")
        except SpoolFull:
            pass
        return JSONResponse({"error": reason, "message": message}, status_code=status)

    async def tenant_and_body(request: Request, api: str) -> tuple[str, bytes] | Response:
        """The token's tenant and the whole body, or the refusal to answer with."""
        try:
            tenant = auth.tenant_of(request.headers.get("authorization"), request.headers.get(names.META_TENANT))
        except AuthError as error:
            core.refuse_caller(error.status, error.message, api=api, tenant=_token_tenant(auth, request))
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
        return tenant, body

    @app.post("/v1/capture")
    async def capture(request: Request) -> Response:
        read = await tenant_and_body(request, "http")
        if isinstance(read, Response):
            return read
        tenant, body = read
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

    @app.post("/v1/traces")
    async def otlp_traces(request: Request) -> Response:
        read = await tenant_and_body(request, "otlp")
        if isinstance(read, Response):
            return read
        tenant, body = read
        protobuf = request.headers.get("content-type", "").split(";")[0].strip().lower() == PROTOBUF
        try:
            if request.headers.get("content-encoding", "").lower() == "gzip":
                body = _gunzip(body, max_request_bytes)
            document = protobuf_document(body) if protobuf else json.loads(body.decode("utf-8"))
            spans = sum(len(scope.get("spans") or []) for resource in document.get("resourceSpans") or []
                        for scope in resource.get("scopeSpans") or [])
        except BodyTooLarge as error:
            return await run_in_threadpool(reject, 413, "too_large", f"the body inflates past {max_request_bytes} "
                                           "bytes (ingest.max_request_bytes); send smaller batches", tenant, error.head)
        except (NotOtlp, ValueError, UnicodeDecodeError, RecursionError, zlib.error, AttributeError) as error:
            return await run_in_threadpool(reject, 400, "invalid_otlp", "the body is not an OTLP "
                                           f"ExportTraceServiceRequest ({type(error).__name__}: {error}); send OTLP "
                                           "JSON or protobuf", tenant, body)
        try:
            core.rate_limiter.take(tenant, max(1, spans))
        except RateLimited as error:
            core.refuse_caller("rate_limited", str(error), api="otlp", tenant=tenant)
            return JSONResponse({"error": "rate_limited", "message": str(error)}, status_code=429,
                                headers={"Retry-After": str(max(1, math.ceil(error.retry_after_s)))})
        try:
            refused, why = await run_in_threadpool(traces.capture, tenant, document)
        except NotOtlp as error:
            return await run_in_threadpool(reject, 400, "invalid_otlp", str(error), tenant, body)
        except NotConfigured as error:
            return JSONResponse({"error": "not_configured", "message": str(error)}, status_code=501)
        except SpoolFull as error:
            return JSONResponse({"error": "unavailable", "message": f"not stored, retry later: {error}"},
                                status_code=503, headers={"Retry-After": "5"})
        if protobuf:
            return Response(protobuf_response(refused, why), media_type=PROTOBUF)
        return JSONResponse(json_response(refused, why))

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok", "kafka_direct": core.delivery.direct()}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(core.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _gunzip(body: bytes, limit: int) -> bytes:
    """A gzip body inflated, refused (BodyTooLarge) once it passes limit bytes: a small bomb stays small."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    inflated = inflater.decompress(body, limit + 1)
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(body[:KEPT_OF_REFUSED_BODY], len(inflated))
    return inflated


def _token_tenant(auth: TokenAuth, request: Request) -> str:
    """The token's own tenant, for counting a cross-tenant attempt ("" when the token is no tenant's)."""
    try:
        return auth.tenant_of(request.headers.get("authorization"))
    except AuthError:
        return ""
