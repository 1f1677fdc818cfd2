"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models (+ admin, health).

The official `openai` client works against it unchanged, with or without liverl's headers. Every
response carries the ids an SDK call links to: the body's `id` IS the recorded ModelCall's request id,
and the headers x-liverl-session-id, x-liverl-request-id and x-liverl-policy-version repeat the
session, the request and the version that served it (the body's "liverl" extension holds them too,
with the token ids and sampling logprobs). The session is named by a header, a per-session base URL
(/s/<session_id>/v1/...), the body's metadata or user, or else the call is a session of its own
(serving.session_ids); agent id and role travel as x-liverl-* headers; the tenant is the API key's.
Handlers are module functions; what they share is an HttpContext on app.state, and what guards them
(key, rate limit, headers, body) are the dependencies of serving.http_guard.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from liverl.contracts import names
from liverl.contracts.chat import render_chat
from serving.auth import Principal
from serving.chat import parse_tool_calls
from serving.generation import BadRequest, Call, Caller, DeadlineExceeded
from serving.http_guard import (ApiError, Body, FastJSONResponse, HttpContext, admin, api_error_response,
                                authenticated, caller, context, json_body, parse, reject, unexpected_error_response)
from serving.openai_schema import ChatRequest, CompletionRequest, Sampled, Strict, one_prompt
from serving.session_ids import (CHAT_ID_PREFIX, COMPLETION_ID_PREFIX, REQUEST_ID_HEADER, body_session_id,
                                 header_value)

router = APIRouter()


def build_http_app(http_context: HttpContext) -> FastAPI:
    app = FastAPI(title="liverl policy server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serving = http_context
    app.add_exception_handler(ApiError, api_error_response)
    app.add_exception_handler(Exception, unexpected_error_response)
    app.include_router(router)
    return app


@router.get("/health")
async def health(ctx: HttpContext = Depends(context)) -> dict:
    return {"status": "ok", "policy_version": ctx.info().policy_version}


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


@router.post("/v1/completions")
@router.post("/s/{session_id}/v1/completions")
async def complete(who: Caller = Depends(caller), body: Body = Depends(json_body),
                   principal: Principal = Depends(authenticated), ctx: HttpContext = Depends(context)):
    request = parse(CompletionRequest, body, ctx, principal)
    _check_model(ctx, principal, body, request)
    try:
        prompt, ids = one_prompt(request.prompt)
    except ValueError as error:
        raise reject(ctx, principal, body, BadRequest("bad-prompt", str(error), "prompt"), CompletionRequest) from None
    _name(ctx, principal, body, request, who, "openai-completions", COMPLETION_ID_PREFIX)
    call = await _begin(ctx, principal, body, request, who, prompt, ids, request.max_tokens)
    created, cid, headers = int(time.time()), call.request_id, _id_headers(call)
    if request.stream:
        return StreamingResponse(_completion_events(call, cid, created, ctx.completions.model_name),
                                 media_type="text/event-stream", headers=headers,
                                 background=BackgroundTask(call.close))  # frees the lease on early disconnect
    await _run(call)
    logprobs = None
    if request.logprobs is not None:
        tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
        logprobs = {"tokens": tokens, "token_logprobs": call.logprobs, "top_logprobs": None, "text_offset": None}
    choice = {"index": 0, "text": call.text, "finish_reason": call.finish_reason, "logprobs": logprobs}
    return FastJSONResponse({"id": cid, "object": "text_completion", "created": created,
                         "model": ctx.completions.model_name, "choices": [choice], "usage": _usage(call),
                         "liverl": _ext(call, call.token_ids, call.logprobs)}, headers=headers)


@router.post("/v1/chat/completions")
@router.post("/s/{session_id}/v1/chat/completions")
async def chat(who: Caller = Depends(caller), body: Body = Depends(json_body),
               principal: Principal = Depends(authenticated), ctx: HttpContext = Depends(context)):
    request = parse(ChatRequest, body, ctx, principal)
    _check_model(ctx, principal, body, request)
    slot = ctx.completions.router.champion
    if slot is None:
        raise ApiError(503, "no policy version is loaded yet: retry shortly", "server_error")
    try:  # a chat template is code: render off the loop, and refuse what it cannot render
        prompt = await asyncio.to_thread(render_chat, slot.tokenizer, request.message_dicts(), request.tool_dicts())
    except Exception as error:
        raise reject(ctx, principal, body, BadRequest("bad-messages", f"messages could not be rendered: {error}",
                                                      "messages"), ChatRequest) from None
    _name(ctx, principal, body, request, who, "openai-chat", CHAT_ID_PREFIX)
    call = await _begin(ctx, principal, body, request, who, prompt, None,
                        request.max_completion_tokens if request.max_completion_tokens is not None
                        else request.max_tokens)
    created, cid, headers = int(time.time()), call.request_id, _id_headers(call)
    if request.stream:
        return StreamingResponse(_chat_events(call, request, cid, created, ctx.completions.model_name),
                                 media_type="text/event-stream", headers=headers,
                                 background=BackgroundTask(call.close))  # frees the lease on early disconnect
    await _run(call)
    tools = request.tool_dicts()
    tool_calls = parse_tool_calls(call.text, tools)
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls else call.text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else call.finish_reason,
              "logprobs": _chat_logprobs(call) if request.logprobs else None}
    return FastJSONResponse({"id": cid, "object": "chat.completion", "created": created,
                         "model": ctx.completions.model_name, "choices": [choice], "usage": _usage(call),
                         "liverl": _ext(call, call.token_ids, call.logprobs)}, headers=headers)


class SwapBody(Strict):
    version: str = ""


class RollbackBody(Strict):
    reason: str = ""


@router.post("/admin/swap")
async def admin_swap(principal: Principal = Depends(admin), body: Body = Depends(json_body),
                     ctx: HttpContext = Depends(context)) -> dict:
    version = parse(SwapBody, body, ctx, principal).version
    swapper = ctx.swapper
    if swapper.registry is None:
        raise ApiError(409, "serving a fixed policy_dir: there is no registry to swap from", "invalid_request_error")
    if not version:
        version = await asyncio.to_thread(swapper.registry.alias_version, swapper.config.alias) or ""
        if not version:
            raise ApiError(404, f"alias {swapper.config.alias!r} is not set", "invalid_request_error")
    result = await swapper.swap_to(version, reason="force")
    return {"ok": result.ok, "policy_version": result.version, "previous_version": result.previous,
            "message": result.message}


@router.post("/admin/rollback")
async def admin_rollback(principal: Principal = Depends(admin), body: Body = Depends(json_body),
                         ctx: HttpContext = Depends(context)) -> dict:
    reason = parse(RollbackBody, body, ctx, principal).reason
    result = await ctx.swapper.rollback("admin", {"message": reason[:500]})
    return {"ok": result.ok, "policy_version": result.version, "previous_version": result.previous,
            "message": result.message}


# -- the steps the completion handlers share ------------------------------------------------------------


def _check_model(ctx: HttpContext, principal: Principal, body: Body, request: Sampled) -> None:
    name = ctx.completions.model_name
    if request.model not in ("", name):
        raise reject(ctx, principal, body, BadRequest("unknown-model", f"this model is not served here: use {name!r}",
                                                      "model"), type(request), status=404)


def _name(ctx: HttpContext, principal: Principal, body: Body, request: Sampled, who: Caller, api: str,
          id_prefix: str) -> None:
    """Fix the call's API, its request id (the reply's `id`) and, when no header or URL did, its session."""
    who.api = api
    who.request_id = f"{id_prefix}{uuid.uuid4().hex}"
    if not who.session_id:
        try:
            who.session_id = body_session_id(request.metadata, request.user)
        except BadRequest as error:
            raise reject(ctx, principal, body, error, type(request)) from None


def _id_headers(call: Call) -> dict[str, str]:
    return {names.META_POLICY_VERSION: call.version, names.META_SESSION_ID: header_value(call.session_id),
            REQUEST_ID_HEADER: header_value(call.request_id)}


async def _begin(ctx: HttpContext, principal: Principal, body: Body, request: Sampled, who: Caller,
                 prompt: str | None, ids: list[int] | None, max_tokens: int | None) -> Call:
    completions = ctx.completions
    try:
        sampling = completions.sampling(request.temperature, request.top_p, request.top_k, max_tokens, request.seed,
                                        request.stop)
        return await completions.begin(who, prompt, ids, sampling)
    except BadRequest as error:
        raise reject(ctx, principal, body, error, type(request)) from None
    except RuntimeError as error:  # nothing loaded yet
        raise ApiError(503, f"{error}: retry shortly", "server_error") from error


async def _run(call: Call) -> None:
    try:
        await call.run()
    except DeadlineExceeded as error:
        raise ApiError(504, str(error), "timeout", "deadline-exceeded") from None


async def _completion_events(call: Call, cid: str, created: int, model_name: str) -> AsyncIterator[bytes | str]:
    try:
        async for piece in call.stream():
            choice = {"index": 0, "text": piece.text, "finish_reason": piece.delta.finish_reason, "logprobs": None}
            yield _sse({"id": cid, "object": "text_completion", "created": created, "model": model_name,
                        "choices": [choice], "liverl": _ext(call, piece.delta.token_ids, piece.delta.logprobs)})
    except DeadlineExceeded as error:
        yield _sse({"error": {"message": str(error), "type": "timeout", "param": None, "code": "deadline-exceeded"}})
    yield "data: [DONE]\n\n"


async def _chat_events(call: Call, request: ChatRequest, cid: str, created: int,
                       model_name: str) -> AsyncIterator[bytes | str]:
    def chunk(delta: dict, finish: str | None, ids=(), logprobs=()) -> bytes:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_name,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                     "liverl": _ext(call, list(ids), list(logprobs))})

    yield chunk({"role": "assistant", "content": ""}, None)
    try:
        tools = request.tool_dicts()
        if tools:  # a tool call is only known once the text is complete: send it whole
            await call.run()
            tool_calls = parse_tool_calls(call.text, tools)
            if tool_calls:
                delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)]}
                yield chunk(delta, "tool_calls", call.token_ids, call.logprobs)
            else:
                yield chunk({"content": call.text}, call.finish_reason, call.token_ids, call.logprobs)
        else:
            async for piece in call.stream():
                yield chunk({"content": piece.text} if piece.text else {}, piece.delta.finish_reason,
                            piece.delta.token_ids, piece.delta.logprobs)
    except DeadlineExceeded as error:
        yield _sse({"error": {"message": str(error), "type": "timeout", "param": None, "code": "deadline-exceeded"}})
    yield "data: [DONE]\n\n"


def _usage(call: Call) -> dict:
    return {"prompt_tokens": len(call.prompt_token_ids), "completion_tokens": len(call.token_ids),
            "total_tokens": len(call.prompt_token_ids) + len(call.token_ids)}


def _ext(call: Call, token_ids: list[int], logprobs: list[float]) -> dict:
    return {"policy_version": call.version, "request_id": call.request_id, "session_id": call.session_id,
            "token_ids": list(token_ids),
            "logprobs": list(logprobs)}


def _chat_logprobs(call: Call) -> dict:
    tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, call.logprobs)]}


def _sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
