"""The HTTP JSON endpoint for products not written in Python.

    POST /v1/capture   Authorization: Bearer <tenant token>
    {"events": [{"eventId": "...", "sessionId": "...", "schemaVersion": 1, "eventTimeMs": 1700000000000,
                 "userMessage": {"text": "hi"}}]}

Events use the protobuf JSON mapping of liverl.v1.SessionEvent. Answers: 200 with the CaptureResponse
(per-event rejections inside), 400 bad body, 401 missing/wrong token, 403 wrong tenant, 408 body too slow,
413 too large (refused from Content-Length, or while streaming: a huge body is never read whole), 429 over the
tenant's rate limit and 503 not stored (both with Retry-After), 415 a Content-Encoding it does not
read (/v1/capture reads none, /v1/traces gzip). A refused request is dead-lettered as a summary (sizes, type,
encoding, reason: liverl/contracts/refused_request.py), never its body. An unexpected failure answers 500 and is
logged by its type and a redacted message, never the value that caused it. GET /healthz and GET /metrics too.

    POST /v1/traces    OTLP/HTTP (JSON or protobuf) GenAI spans, same token and statuses (ingest/otlp_api.py);
                       413 too_many_events when its spans would become more than ingest.max_events_per_request
                       events, and the rate limit is charged per event
"""

from __future__ import annotations

import asyncio
import json
import logging
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
from ingest.otlp_api import (
    NotConfigured,
    NotOtlp,
    OtlpTraces,
    TooManySpanEvents,
    json_response,
    protobuf_document,
    protobuf_response,
)
from ingest.validation import parse_json
from liverl.contracts import names
from liverl.contracts.refused_request import RefusedRequest
from liverl.io.spool import SpoolFull
from liverl.redaction.error_log import log_unexpected

log = logging.getLogger("liverl.ingest.http")
AUTH_STATUS = {"unauthenticated": 401, "permission_denied": 403}
PROTOBUF = "application/x-protobuf"
IDENTITY = ("", "identity")


class BodyTooLarge(Exception):
    def __init__(self, size: int):
        super().__init__(f"{size} bytes and counting")
        self.size = size


async def read_bounded(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk; raises BodyTooLarge as soon as it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size)
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(core: CaptureCore, auth: TokenAuth, max_batch_events: int, max_request_bytes: int,
              tokenizer_dir: Path | None = None) -> FastAPI:
    """tokenizer_dir: the policy's Hugging Face folder, which /v1/traces rebuilds token ids with (None: it
    answers 501)."""
    app = FastAPI(title="liverl capture", docs_url=None, redoc_url=None, openapi_url=None)
    traces = OtlpTraces(core, tokenizer_dir, core.max_events_per_request)

    def reject(status: int, reason: str, message: str, tenant: str, request: Request, body_bytes: int,
               inflated_bytes: int = 0) -> JSONResponse:
        """Refuse the request: dead-letter its summary (never its body) and answer status."""
        api = "otlp" if request.url.path.endswith("/traces") else "http"
        summary = RefusedRequest.of(api, reason, body_bytes, inflated_bytes=inflated_bytes,
                                    content_type=request.headers.get("content-type", ""),
                                    content_encoding=request.headers.get("content-encoding", "")).encode()
        try:
            core.reject_request(reason, message, tenant, summary, api=api)
        except SpoolFull:
            pass
        return JSONResponse({"error": reason, "message": message}, status_code=status)

    def failed(error: Exception, api: str) -> JSONResponse:
        log_unexpected(log, f"{api} request failed", error, core.redactor.redact_text)
        return JSONResponse({"error": "internal_error", "message": f"the service failed on this request "
                             f"({type(error).__name__}); do not resend it unchanged"}, status_code=500)

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
                                           f"{max_request_bytes} (ingest.max_request_bytes)", tenant, request,
                                           int(declared))
        try:
            body = await asyncio.wait_for(read_bounded(request, max_request_bytes), core.handler_timeout_s)
        except BodyTooLarge as error:
            return await run_in_threadpool(reject, 413, "too_large", f"the body passed {max_request_bytes} bytes "
                                           "(ingest.max_request_bytes); send smaller batches", tenant, request,
                                           error.size)
        except asyncio.TimeoutError:
            return await run_in_threadpool(reject, 408, "body_timeout", "the body did not arrive within "
                                           f"{core.handler_timeout_s:g} s (ingest.handler_timeout_s)", tenant,
                                           request, 0)
        encoding = request.headers.get("content-encoding", "").strip().lower()
        readable = IDENTITY + (("gzip",) if api == "otlp" else ())
        if encoding not in readable:
            return await run_in_threadpool(reject, 415, "unsupported_encoding", "Content-Encoding "
                                           f"{encoding[:40]!r} is not read here; send the body uncompressed"
                                           f"{' or gzip-compressed' if 'gzip' in readable else ''}", tenant,
                                           request, len(body))
        return tenant, body

    @app.post("/v1/capture")
    async def capture(request: Request) -> Response:
        try:
            return await capture_events(request)
        except Exception as error:  # noqa: BLE001 - a bug: logged without the client's values, answered 500
            return failed(error, "http")

    async def capture_events(request: Request) -> Response:
        read = await tenant_and_body(request, "http")
        if isinstance(read, Response):
            return read
        tenant, body = read

        def refuse(status: int, reason: str, message: str):
            return run_in_threadpool(reject, status, reason, message, tenant, request, len(body))
        try:
            document = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            return await refuse(400, "invalid_utf8", "the body is not valid UTF-8")
        except (json.JSONDecodeError, RecursionError) as error:
            return await refuse(400, "invalid_json", f"the body is not JSON: {type(error).__name__} at character "
                                                     f"{getattr(error, 'pos', '?')}")
        events = document.get("events") if isinstance(document, dict) else None
        if not isinstance(events, list):
            return await refuse(400, "wrong_type", 'the body must be {"events": [...]}')
        if len(events) > max_batch_events:
            return await refuse(413, "too_many_events", f"{len(events)} events; send at most {max_batch_events} "
                                                        "(ingest.max_batch_events)")
        limited = charge(tenant, len(events), "http")
        if limited is not None:
            return limited
        try:
            response = await run_in_threadpool(core.capture, tenant, events, parse_json, "http")
        except SpoolFull as error:
            return unavailable(error)
        return JSONResponse(json_format.MessageToDict(response, always_print_fields_with_no_presence=True))

    @app.post("/v1/traces")
    async def otlp_traces(request: Request) -> Response:
        try:
            return await capture_traces(request)
        except Exception as error:  # noqa: BLE001 - a bug: logged without the client's values, answered 500
            return failed(error, "otlp")

    async def capture_traces(request: Request) -> Response:
        read = await tenant_and_body(request, "otlp")
        if isinstance(read, Response):
            return read
        tenant, body = read
        received = len(body)
        protobuf = request.headers.get("content-type", "").split(";")[0].strip().lower() == PROTOBUF

        def refuse(status: int, reason: str, message: str, inflated_bytes: int = 0):
            return run_in_threadpool(reject, status, reason, message, tenant, request, received, inflated_bytes)
        try:
            if request.headers.get("content-encoding", "").strip().lower() == "gzip":
                body = _gunzip(body, max_request_bytes)
            document = protobuf_document(body) if protobuf else json.loads(body.decode("utf-8"))
        except BodyTooLarge as error:
            return await refuse(413, "too_large", f"the body inflates past {max_request_bytes} bytes "
                                                  "(ingest.max_request_bytes); send smaller batches",
                                inflated_bytes=error.size)
        except (NotOtlp, ValueError, UnicodeDecodeError, RecursionError, zlib.error, EOFError) as error:
            return await refuse(400, "invalid_otlp", "the body is not an OTLP ExportTraceServiceRequest "
                                                     f"({_described(error)}); send OTLP JSON or protobuf, "
                                                     "uncompressed or gzip", inflated_bytes=len(body))
        try:
            mapped = await run_in_threadpool(traces.map, tenant, document)
        except NotOtlp as error:
            return await refuse(400, "invalid_otlp", str(error), inflated_bytes=len(body))
        except TooManySpanEvents as error:
            return await refuse(413, "too_many_events", str(error), inflated_bytes=len(body))
        limited = charge(tenant, mapped.events, "otlp")  # per event: a span may fan out into many
        if limited is not None:
            return limited
        try:
            refused, why = await run_in_threadpool(traces.store, mapped)
        except NotConfigured as error:
            return JSONResponse({"error": "not_configured", "message": str(error)}, status_code=501)
        except SpoolFull as error:
            return unavailable(error)
        if protobuf:
            return Response(protobuf_response(refused, why), media_type=PROTOBUF)
        return JSONResponse(json_response(refused, why))

    def charge(tenant: str, events: int, api: str) -> Response | None:
        """Take `events` from the tenant's bucket; the 429 to answer when it is over its rate."""
        try:
            core.rate_limiter.take(tenant, events)
        except RateLimited as error:
            core.refuse_caller("rate_limited", str(error), api=api, tenant=tenant)
            return JSONResponse({"error": "rate_limited", "message": str(error)}, status_code=429,
                                headers={"Retry-After": str(max(1, math.ceil(error.retry_after_s)))})
        return None

    def unavailable(error: SpoolFull) -> Response:
        return JSONResponse({"error": "unavailable", "message": f"not stored, retry later: {error}"},
                            status_code=503, headers={"Retry-After": "5"})

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
        raise BodyTooLarge(len(inflated))
    if not inflater.eof:
        raise EOFError("the gzip stream ends early")
    return inflated


def _described(error: Exception) -> str:
    """An error of reading the body, without the body's text (JSON errors quote none, protobuf ones may)."""
    if isinstance(error, json.JSONDecodeError):
        return f"JSON: {error.msg} at character {error.pos}"
    if isinstance(error, NotOtlp):
        return str(error)
    return type(error).__name__


def _token_tenant(auth: TokenAuth, request: Request) -> str:
    """The token's own tenant, for counting a cross-tenant attempt ("" when the token is no tenant's)."""
    try:
        return auth.tenant_of(request.headers.get("authorization"))
    except AuthError:
        return ""
