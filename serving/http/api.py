"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/responses, /v1/models (+ admin,
health).

The official `openai` client works against it unchanged, with or without liverl's headers. The session
is named by a header, a per-session base URL (/s/<session_id>/v1/...), the body's metadata or user, or
else the call is a session of its own (serving.recording.session_ids); agent id and role travel as x-liverl-*
headers; the tenant is the API key's. The completion routes, nearly all the traffic, are plain ASGI
(serving.http.asgi_routes, handlers in serving.http.completions and serving.http.responses.api); the FastAPI app here
serves the rest (and refuses the Responses API's retrieve/delete/cancel routes, which are not served), its
handlers guarded by the dependencies of serving.http.dependencies. What they share is an HttpContext.
"""

from __future__ import annotations

from collections.abc import Awaitable

from fastapi import APIRouter, Depends, FastAPI

from liverl.contracts import names
from serving.auth import Principal
from serving.http.asgi_routes import CompletionRoutes
from serving.http.dependencies import (
    FastJSONResponse,
    admin,
    api_error_response,
    authenticated,
    context,
    json_body,
    unexpected_error_response,
)
from serving.http.guard import ApiError, Body, HttpContext, parse
from serving.http.openai_schema import Strict
from serving.http.responses.api import ResponsesApi
from serving.http.responses.state import ResponseStore
from serving.router import Router, underlying
from serving.swap.result import AdminRefused, SwapResult

router = APIRouter()


def build_http_app(http_context: HttpContext, responses: ResponseStore) -> CompletionRoutes:
    """The ASGI app to serve: the completion routes in front, this module's FastAPI app behind them.
    responses: what POST /v1/responses keeps for previous_response_id (ResponseStore.from_config(serving))."""
    return CompletionRoutes(http_context, build_fastapi_app(http_context), ResponsesApi(responses))


def build_fastapi_app(http_context: HttpContext) -> FastAPI:
    """/health, /v1/models (+ per session) and /admin/*: the routes that are not the completions."""
    app = FastAPI(title="liverl policy server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serving = http_context
    app.add_exception_handler(ApiError, api_error_response)
    app.add_exception_handler(Exception, unexpected_error_response)
    app.include_router(router)
    return app


@router.get("/health")
async def health(ctx: HttpContext = Depends(context)) -> FastJSONResponse:
    body = {"status": "ok", "policy_version": ctx.info().policy_version}
    failure = ctx.engine_failure()
    if failure:
        body |= {"status": "engine_dead", "detail": failure}
    engines = _engine_states(ctx.completions.router)
    if engines:
        body["engines"] = engines
    return FastJSONResponse(body, status_code=503 if failure else 200)


def _engine_states(slots: Router) -> dict[str, dict]:
    """What the engines serving the champion and the canary say of themselves, by role, where they can (the
    upstream engine: its servers, which are up, their logprobs modes); an engine both serve is shown once."""
    states, seen = {}, set()
    for role, slot in (("champion", slots.champion), ("canary", slots.canary)):
        engine = underlying(slot.engine) if slot is not None else None
        if engine is not None and id(engine) not in seen and hasattr(engine, "describe"):
            seen.add(id(engine))
            states[role] = engine.describe()
    return states


@router.get("/v1/models")
@router.get("/s/{session_id}/v1/models")
async def models(principal: Principal = Depends(authenticated),
                 ctx: HttpContext = Depends(context)) -> FastJSONResponse:
    current = ctx.info()
    created, name = current.loaded_at_ms // 1000, ctx.completions.model_name
    data = [{"id": name, "object": "model", "created": created, "owned_by": "liverl",
             "policy_version": current.policy_version}]
    if current.canary_version:
        data.append({"id": f"{name}@canary", "object": "model", "created": created, "owned_by": "liverl",
                     "policy_version": current.canary_version})
    return FastJSONResponse({"object": "list", "data": data},
                            headers={names.META_POLICY_VERSION: current.policy_version})


@router.api_route("/v1/responses/{response_id}", methods=["GET", "DELETE"])
@router.api_route("/v1/responses/{response_id}/{action}", methods=["GET", "POST"])
@router.api_route("/s/{session_id}/v1/responses/{response_id}", methods=["GET", "DELETE"])
@router.api_route("/s/{session_id}/v1/responses/{response_id}/{action}", methods=["GET", "POST"])
async def responses_not_served(principal: Principal = Depends(authenticated)) -> FastJSONResponse:
    raise ApiError(404, "only POST /v1/responses is served: responses are kept only to be continued with "
                   "previous_response_id, not to be retrieved, listed, cancelled or deleted", "invalid_request_error",
                   "not-served")


class SwapBody(Strict):
    version: str = ""
    tenant: str = ""  # "": the shared group


class RollbackBody(Strict):
    reason: str = ""
    tenant: str = ""


@router.post("/admin/swap")
async def admin_swap(principal: Principal = Depends(admin), body: Body = Depends(json_body),
                     ctx: HttpContext = Depends(context)) -> dict:
    request = parse(SwapBody, body, ctx, principal)
    return await _admin_answer(ctx.rollout.force_swap(request.version, request.tenant))


@router.post("/admin/rollback")
async def admin_rollback(principal: Principal = Depends(admin), body: Body = Depends(json_body),
                         ctx: HttpContext = Depends(context)) -> dict:
    request = parse(RollbackBody, body, ctx, principal)
    return await _admin_answer(ctx.rollout.admin_rollback(request.reason, request.tenant))


async def _admin_answer(operation: Awaitable[SwapResult]) -> dict:
    """The admin operation's result as the reply's body; a refusal as the status gRPC's code stands for."""
    try:
        return _swap_body(await operation)
    except AdminRefused as refused:
        raise ApiError(ADMIN_REFUSALS[refused.kind], str(refused), "invalid_request_error") from refused


ADMIN_REFUSALS = {"failed-precondition": 409, "not-found": 404}


def _swap_body(result: SwapResult) -> dict:
    """What ForceSwap and Rollback answer over gRPC (SwapResponse), as JSON."""
    return {"ok": result.ok, "policy_version": result.version, "previous_version": result.previous,
            "message": result.message}
