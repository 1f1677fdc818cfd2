"""The guards of serving.http.guard as FastAPI dependencies, for the routes FastAPI still serves
(/health, /v1/models, /admin/*), and the responses of the FastAPI app's exception handlers.

The dependencies are `async def` although none of them waits: FastAPI runs a plain `def` dependency on
a worker thread, a thread hop per dependency per request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from liverl.redaction.error_log import log_unexpected
from serving.auth import Principal
from serving.http.guard import (
    UNEXPECTED_ERROR,
    ApiError,
    Body,
    ClientLeft,
    HttpContext,
    authenticate,
    authenticate_admin,
    log,
    read_json_body,
)


class FastJSONResponse(JSONResponse):
    """A JSON response rendered by orjson (several times faster than the json module for a completion body;
    FastAPI's ORJSONResponse is deprecated). Non-finite floats become null, never invalid JSON."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def api_error_response(request: Request, error: ApiError) -> FastJSONResponse:
    return FastJSONResponse(error.payload(), status_code=error.status, headers=error.headers)


async def unexpected_error_response(request: Request, error: Exception) -> FastJSONResponse:
    log_unexpected(log, f"unexpected error serving {request.url.path}", error)  # no traceback: it quotes values
    return FastJSONResponse(UNEXPECTED_ERROR, status_code=500)


async def context(request: Request) -> HttpContext:
    return request.app.state.serving


async def authenticated(request: Request, ctx: HttpContext = Depends(context)) -> Principal:
    return authenticate(ctx, request.headers.get("authorization"))


async def admin(request: Request, ctx: HttpContext = Depends(context)) -> Principal:
    return authenticate_admin(ctx, request.headers.get("authorization"))


async def json_body(request: Request, principal: Principal = Depends(authenticated),
                    ctx: HttpContext = Depends(context)) -> Body:
    return await read_json_body(ctx, principal, request.headers.get("content-length"), _chunks(request))


async def _chunks(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        raise ClientLeft() from None
