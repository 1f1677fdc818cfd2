"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models (+ admin).

The official `openai` client works against it unchanged. Every response carries the version that
served it in the x-liverl-policy-version header (and in the body's "liverl" extension, with the
token ids and sampling logprobs). Session id and agent role travel as x-liverl-* headers.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.background import BackgroundTask

from liverl.contracts import names
from serving.auth import Keys
from serving.chat import parse_tool_calls, render_chat
from serving.generation import BadRequest, Call, Caller, Completions, parse_role


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code


class _Sampled(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI adds fields often; unknown ones are ignored

    model: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = 1


class CompletionRequest(_Sampled):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = None


class ChatRequest(_Sampled):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None


def build_http_app(completions: Completions, info, swapper, keys: Keys) -> FastAPI:
    app = FastAPI(title="liverl policy server", docs_url=None, redoc_url=None)
    model_name = completions.model_name

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError):
        return JSONResponse({"error": {"message": str(error), "type": error.kind, "code": error.code}},
                            status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        _dead_letter(completions, request, "invalid-request", message, await request.body())
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": None}},
                            status_code=400)

    def require(request: Request, admin: bool = False) -> None:
        authorization = request.headers.get("authorization")
        if not (keys.allows_admin(authorization) if admin else keys.allows_use(authorization)):
            completions.metrics.rejected.labels("unauthenticated").inc()
            raise ApiError(401, "admin operations need an admin API key" if admin else
                           "missing or wrong API key: send 'Authorization: Bearer KEY'", "authentication_error",
                           "invalid_api_key")

    def check_model(request: Request, body: _Sampled) -> None:
        if body.model not in ("", model_name):
            _dead_letter(completions, request, "unknown-model", body.model, body.model_dump_json().encode())
            raise ApiError(404, f"model {body.model!r} is not served here: use {model_name!r}",
                           "invalid_request_error", "model_not_found")
        if body.n != 1:
            raise ApiError(400, "n must be 1: send one request per completion", "invalid_request_error")

    def begin(request: Request, body: _Sampled, api: str, prompt: str | None, ids: list[int] | None,
              max_tokens: int | None) -> Call:
        caller = Caller(api=api, session_id=request.headers.get(names.META_SESSION_ID, ""),
                        agent_id=request.headers.get(names.META_AGENT_ID, ""),
                        tenant_id=request.headers.get(names.META_TENANT, ""))
        try:
            caller.agent_role = parse_role(request.headers.get(names.META_AGENT_ROLE, ""))
            sampling = completions.sampling(body.temperature, body.top_p, body.top_k, max_tokens, body.seed,
                                            body.stop)
            return completions.begin(caller, prompt, ids, sampling)
        except BadRequest as error:
            completions.metrics.rejected.labels(error.reason).inc()
            _dead_letter(completions, request, error.reason, str(error), body.model_dump_json().encode())
            raise ApiError(400, str(error), "invalid_request_error", error.reason) from error
        except RuntimeError as error:
            raise ApiError(503, str(error), "server_error") from error

    @app.get("/health")
    async def health():
        return {"status": "ok", "policy_version": info().policy_version}

    @app.get("/v1/models")
    async def models(request: Request):
        require(request)
        current = info()
        data = [{"id": model_name, "object": "model", "created": current.loaded_at_ms // 1000, "owned_by": "liverl",
                 "policy_version": current.policy_version}]
        if current.canary_version:
            data.append({"id": f"{model_name}@canary", "object": "model", "created": current.loaded_at_ms // 1000,
                         "owned_by": "liverl", "policy_version": current.canary_version})
        return JSONResponse({"object": "list", "data": data},
                            headers={names.META_POLICY_VERSION: current.policy_version})

    @app.post("/v1/completions")
    async def complete(request: Request, body: CompletionRequest):
        require(request)
        check_model(request, body)
        prompt, ids = _one_prompt(body.prompt)
        call = begin(request, body, "openai-completions", prompt, ids, body.max_tokens)
        created, cid = int(time.time()), f"cmpl-{call.request_id}"
        headers = {names.META_POLICY_VERSION: call.version}
        if body.stream:
            async def events():
                async for piece in call.stream():
                    choice = {"index": 0, "text": piece.text, "finish_reason": piece.delta.finish_reason,
                              "logprobs": None}
                    yield _sse({"id": cid, "object": "text_completion", "created": created, "model": model_name,
                                "choices": [choice], "liverl": _ext(call, piece.delta.token_ids,
                                                                    piece.delta.logprobs)})
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream", headers=headers,
                                     background=BackgroundTask(call.close))  # frees the lease on early disconnect
        await call.run()
        logprobs = None
        if body.logprobs is not None:
            tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
            logprobs = {"tokens": tokens, "token_logprobs": call.logprobs, "top_logprobs": None, "text_offset": None}
        return JSONResponse({
            "id": cid, "object": "text_completion", "created": created, "model": model_name,
            "choices": [{"index": 0, "text": call.text, "finish_reason": call.finish_reason, "logprobs": logprobs}],
            "usage": _usage(call), "liverl": _ext(call, call.token_ids, call.logprobs),
        }, headers=headers)

    @app.post("/v1/chat/completions")
    async def chat(request: Request, body: ChatRequest):
        require(request)
        check_model(request, body)
        slot = completions.router.champion
        if slot is None:
            raise ApiError(503, "no policy version is loaded yet", "server_error")
        try:
            prompt = render_chat(slot.tokenizer, body.messages, body.tools)
        except Exception as error:
            _dead_letter(completions, request, "bad-messages", str(error), body.model_dump_json().encode())
            raise ApiError(400, f"messages could not be rendered: {error}", "invalid_request_error") from error
        call = begin(request, body, "openai-chat", prompt, None, body.max_completion_tokens or body.max_tokens)
        created, cid = int(time.time()), f"chatcmpl-{call.request_id}"
        headers = {names.META_POLICY_VERSION: call.version}
        if body.stream:
            return StreamingResponse(_chat_events(call, body, cid, created, model_name),
                                     media_type="text/event-stream", headers=headers,
                                     background=BackgroundTask(call.close))  # frees the lease on early disconnect
        await call.run()
        tool_calls = parse_tool_calls(call.text, body.tools)
        message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls else call.text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else call.finish_reason,
                  "logprobs": _chat_logprobs(call) if body.logprobs else None}
        return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": model_name,
                             "choices": [choice], "usage": _usage(call),
                             "liverl": _ext(call, call.token_ids, call.logprobs)}, headers=headers)

    @app.post("/admin/swap")
    async def admin_swap(request: Request):
        require(request, admin=True)
        body = await _json_body(request)
        version = str(body.get("version") or "")
        if swapper.registry is None:
            raise ApiError(409, "serving a fixed policy_dir: there is no registry to swap from",
                           "invalid_request_error")
        if not version:
            import asyncio

            version = await asyncio.to_thread(swapper.registry.alias_version, swapper.config.alias) or ""
            if not version:
                raise ApiError(404, f"alias {swapper.config.alias!r} is not set", "invalid_request_error")
        result = await swapper.swap_to(version, reason="force")
        return {"ok": result.ok, "policy_version": result.version, "previous_version": result.previous,
                "message": result.message}

    @app.post("/admin/rollback")
    async def admin_rollback(request: Request):
        require(request, admin=True)
        body = await _json_body(request)
        result = await swapper.rollback("admin", {"message": str(body.get("reason", ""))})
        return {"ok": result.ok, "policy_version": result.version, "previous_version": result.previous,
                "message": result.message}

    return app


async def _chat_events(call: Call, body: ChatRequest, cid: str, created: int, model_name: str):
    def chunk(delta: dict, finish: str | None, ids=(), logprobs=()) -> str:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_name,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                     "liverl": _ext(call, list(ids), list(logprobs))})

    yield chunk({"role": "assistant", "content": ""}, None)
    if body.tools:  # a tool call is only known once the text is complete: send it whole
        await call.run()
        tool_calls = parse_tool_calls(call.text, body.tools)
        if tool_calls:
            delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)]}
            yield chunk(delta, "tool_calls", call.token_ids, call.logprobs)
        else:
            yield chunk({"content": call.text}, call.finish_reason, call.token_ids, call.logprobs)
    else:
        async for piece in call.stream():
            yield chunk({"content": piece.text} if piece.text else {}, piece.delta.finish_reason,
                        piece.delta.token_ids, piece.delta.logprobs)
    yield "data: [DONE]\n\n"


def _one_prompt(prompt) -> tuple[str | None, list[int] | None]:
    if isinstance(prompt, str):
        return prompt, None
    if prompt and all(isinstance(p, int) for p in prompt):
        return None, list(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        return _one_prompt(prompt[0])
    raise ApiError(400, "send one prompt per request (a string or a list of token ids)", "invalid_request_error")


def _usage(call: Call) -> dict:
    return {"prompt_tokens": len(call.prompt_token_ids), "completion_tokens": len(call.token_ids),
            "total_tokens": len(call.prompt_token_ids) + len(call.token_ids)}


def _ext(call: Call, token_ids: list[int], logprobs: list[float]) -> dict:
    return {"policy_version": call.version, "request_id": call.request_id, "token_ids": list(token_ids),
            "logprobs": list(logprobs)}


def _chat_logprobs(call: Call) -> dict:
    tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, call.logprobs)]}


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


async def _json_body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ApiError(400, f"body is not JSON: {error}", "invalid_request_error") from error
    return body if isinstance(body, dict) else {}


def _dead_letter(completions: Completions, request: Request, reason: str, message: str, payload: bytes) -> None:
    if completions.recorder is None:
        return
    completions.recorder.dead_letter(reason, message, request.headers.get(names.META_TENANT) or
                                     completions.default_tenant, request.headers.get(names.META_SESSION_ID, ""),
                                     payload)
