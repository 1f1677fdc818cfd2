"""The HTTP JSON endpoint for products not written in Python.

    POST /v1/capture   Authorization: Bearer <tenant token>
    {"events": [{"eventId": "...", "sessionId": "...", "schemaVersion": 1, "eventTimeMs": 1700000000000,
                 "userMessage": {"text": "hi"}}]}

Events use the protobuf JSON mapping of liverl.v1.SessionEvent. Answers: 200 with the CaptureResponse
(per-event rejections inside), 400 bad body, 401 missing/wrong token, 403 wrong tenant, 413 too large,
503 not stored (retry). GET /healthz and GET /metrics too.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ingest.auth import AuthError, TokenAuth
from ingest.capture import CaptureCore
from ingest.spool import SpoolFull
from ingest.validation import parse_json
from liverl.contracts import names

AUTH_STATUS = {"unauthenticated": 401, "permission_denied": 403}


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
            core.refuse_caller(error.status, error.message, api="http")
            return JSONResponse({"error": error.status, "message": error.message},
                                status_code=AUTH_STATUS[error.status], headers={"WWW-Authenticate": "Bearer"})
        body = await request.body()
        if len(body) > max_request_bytes:
            return await run_in_threadpool(reject, 413, "too_large", f"the body is {len(body)} bytes; send at most "
                                           f"{max_request_bytes} (ingest.max_request_bytes)", tenant, body[:65536])
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
