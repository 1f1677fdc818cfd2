"""What stands before every HTTP handler: the API key, the rate limit, the caller's headers, the body.

Plain functions over (context, headers, path session id, body chunks), run in this order, so a request
is authenticated and rate-limited before a byte of its body is read, and the body is read under a size
cap and a deadline (a 40 MB body is refused after the first megabytes, or at once when its
Content-Length says so). The completion routes call them from their ASGI front (serving.http.asgi_routes);
the routes FastAPI still serves call them through thin dependencies (serving.http.dependencies).
Every refusal is an OpenAI-shaped error ({"error": {"message", "type", "param", "code"}}), counted by
reason; refusals of authenticated callers go to the dead-letter topic as a summary, never the body.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from liverl.contracts import names
from liverl.contracts.refused_request import RefusedRequest
from liverl.v1 import serving_pb2
from serving.auth import Forbidden, Keys, Principal
from serving.generation import ROLES, BadRequest, Caller, Completions, check_id, parse_role, role_name
from serving.rate_limit import RateLimiter
from serving.recording.session_ids import path_session_id
from serving.swap.rollout import Rollout

log = logging.getLogger("liverl.serving.http")

UNEXPECTED_ERROR = {"error": {"message": "internal error: the server logged it", "type": "server_error",
                              "param": None, "code": None}}


@dataclass
class HttpContext:
    """Everything the handlers share: the ASGI front holds it, and the FastAPI app has it on app.state.serving."""

    completions: Completions
    info: Callable[[], serving_pb2.ModelInfoResponse]
    rollout: Rollout
    keys: Keys
    limiter: RateLimiter
    max_request_bytes: int
    body_timeout_s: float
    engine_failure: Callable[[], str | None]  # why the engine can no longer serve, or None


@dataclass
class Body:
    """A request body, read and parsed as a JSON object."""

    size: int
    data: dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.code, self.param, self.headers = status, kind, code, param, headers

    def payload(self) -> dict:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


class ClientLeft(Exception):
    """The client closed the connection before its body was whole."""


def authenticate(ctx: HttpContext, authorization: str | None) -> Principal:
    """The caller's key, checked and rate-limited; nothing of the body has been read yet."""
    principal = ctx.keys.principal(authorization)
    if principal is None:
        raise _refuse(ctx, 401, "unauthenticated", "missing or wrong API key: send 'Authorization: Bearer KEY'",
                      "authentication_error")
    return _rate_limited(ctx, principal)


def authenticate_admin(ctx: HttpContext, authorization: str | None) -> Principal:
    principal = ctx.keys.admin(authorization)
    if principal is None:
        raise _refuse(ctx, 401, "unauthenticated", "admin operations need an admin API key: send "
                      "'Authorization: Bearer KEY'", "authentication_error")
    return _rate_limited(ctx, principal)


def _rate_limited(ctx: HttpContext, principal: Principal) -> Principal:
    wait_s = ctx.limiter.retry_after(principal.key_id)
    if wait_s:
        raise _refuse(ctx, 429, "rate-limited", f"this API key is over its rate limit: retry in {wait_s:.1f} s",
                      "rate_limit_error", headers={"Retry-After": str(max(1, math.ceil(wait_s)))})
    return principal


def identify_caller(ctx: HttpContext, principal: Principal, headers: Mapping[str, str], path_session: str) -> Caller:
    """Who the call is recorded as: the key's tenant; agent id and role from the headers (lower-case names);
    the session from the header, else the per-session base URL's `path_session` ("" when the URL names none;
    the body may name it later: serving.recording.session_ids)."""
    try:
        role = principal.check_role(role_name(parse_role(headers.get(names.META_AGENT_ROLE, ""))))
        tenant = principal.tenant_for(headers.get(names.META_TENANT), ctx.completions.default_tenant)
        session_id = (check_id(headers.get(names.META_SESSION_ID, ""), names.META_SESSION_ID)
                      or path_session_id({"session_id": path_session}))
        return Caller(api="", session_id=session_id,
                      agent_id=check_id(headers.get(names.META_AGENT_ID, ""), names.META_AGENT_ID),
                      agent_role=ROLES[role], tenant_id=tenant,
                      user_id=check_id(headers.get(names.META_USER_ID, ""), names.META_USER_ID))
    except Forbidden as error:
        if error.reason == "cross-tenant":
            ctx.completions.metrics.cross_tenant.labels(principal.tenant or "").inc()
            log.warning("refused a cross-tenant request: key %s of tenant %s", principal.key_id, principal.tenant)
        raise _refuse(ctx, 403, error.reason, str(error), "permission_error") from error
    except BadRequest as error:
        raise reject(ctx, principal, None, error) from error


async def read_json_body(ctx: HttpContext, principal: Principal, content_length: str | None,
                         chunks: AsyncIterator[bytes]) -> Body:
    """The body as a JSON object, read from `chunks` under serving.max_request_bytes and serving.body_timeout_s;
    a declared Content-Length over the cap is refused before anything is read. `chunks` raises ClientLeft
    when the client goes away mid-body."""
    limit = ctx.max_request_bytes
    if content_length is not None and (not content_length.isdigit() or int(content_length) > limit):
        raise _too_large(ctx, principal, int(content_length) if content_length.isdigit() else 0, limit)
    parts, size = [], 0
    try:
        async with asyncio.timeout(ctx.body_timeout_s):
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise _too_large(ctx, principal, size, limit)
                parts.append(chunk)
    except TimeoutError:
        raise _refuse(ctx, 408, "body-timeout", f"the body took longer than {ctx.body_timeout_s:g} s to arrive",
                      "invalid_request_error") from None
    except ClientLeft:
        raise _refuse(ctx, 400, "client-disconnected", "the client went away mid-body", "invalid_request_error")
    try:
        data = orjson.loads(b"".join(parts)) if size else {}
    except orjson.JSONDecodeError as error:
        raise reject(ctx, principal, Body(size, {}), BadRequest("bad-json", f"the body is not JSON: {error}"))
    if not isinstance(data, dict):
        raise reject(ctx, principal, Body(size, {}), BadRequest("bad-json", "the body must be a JSON object"))
    return Body(size, data)


def _too_large(ctx: HttpContext, principal: Principal, size: int, limit: int) -> ApiError:
    _dead_letter(ctx, principal, "too-large", f"body of {size} bytes or more, over {limit}", Body(size, {}), None)
    return _refuse(ctx, 413, "too-large", f"the body is larger than the {limit} bytes served here",
                   "invalid_request_error")


def parse(model: type[BaseModel], body: Body, ctx: HttpContext, principal: Principal):
    """body as a request model; every field error is reported (the first one names the param)."""
    try:
        return model.model_validate(body.data)
    except ValidationError as error:
        problems = [(".".join(map(str, e["loc"])), e["msg"]) for e in error.errors(include_input=False)]
        message = "; ".join(f"{loc or 'body'}: {msg}" for loc, msg in problems[:10])
        raise reject(ctx, principal, body, BadRequest("invalid-request", message, problems[0][0] or None),
                     model) from None


def reject(ctx: HttpContext, principal: Principal, body: Body | None, error: BadRequest,
           model: type[BaseModel] | None = None, status: int = 400) -> ApiError:
    """Count, dead-letter (a summary) and turn a BadRequest into the HTTP error to raise."""
    _dead_letter(ctx, principal, error.reason, str(error), body, model, error.param)
    return _refuse(ctx, status, error.reason, str(error), "invalid_request_error", error.param)


def _refuse(ctx: HttpContext, status: int, reason: str, message: str, kind: str, param: str | None = None,
            headers: dict[str, str] | None = None) -> ApiError:
    ctx.completions.metrics.rejected.labels(reason).inc()
    return ApiError(status, message, kind, reason, param, headers)


def _dead_letter(ctx: HttpContext, principal: Principal, reason: str, message: str, body: Body | None,
                 model: type[BaseModel] | None, param: str | None = None) -> None:
    completions = ctx.completions
    if completions.recorder is None:
        return
    redactor = completions.redactor(principal.tenant or completions.default_tenant)
    safe_message = redactor.redact_text(message[:2000]) if redactor is not None else message[:2000]
    payload = RefusedRequest.of("http", reason, body.size if body else 0, fields=body.data.keys() if body else (),
                                known_fields=model.model_fields if model else (),
                                error_params=[param] if param else ()).encode()
    completions.recorder.dead_letter(reason, safe_message, principal.tenant or completions.default_tenant, "",
                                     payload)
