"""/v1/completions and /v1/chat/completions: a guarded request in, a Reply out (a JSON body or SSE events).

The handlers know nothing of ASGI or FastAPI: serving.http.asgi_routes reads the request, runs the guards
(serving.http.guard) and writes the Reply. Every reply carries the ids an SDK call links to: the body's
`id` IS the recorded ModelCall's request id, and the headers x-liverl-session-id, x-liverl-request-id
and x-liverl-policy-version repeat the session, the request and the version that served it.

A forced tool_choice ("required" or a named function) makes the reply open as a JSON tool call
(serving.http.chat.ForcedToolCall): the opening's tokens end the recorded prompt and the policy samples the
rest, so the record holds only sampled tokens and the prompt the engine really continued. When the whole reply
does not parse as the forced call (broken JSON, a tool not offered, another than the one named), nothing is
made up: the reply is its text as content with the engine's finish_reason, counted in
liverl_serving_forced_tool_call_unmet and logged (`reply_tool_calls`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from liverl.contracts import names
from liverl.contracts.chat import render_chat
from serving.auth import Principal
from serving.generation import BadRequest, Call, Caller, DeadlineExceeded, json_object_end
from serving.http.chat import ForcedToolCall, parse_tool_calls
from serving.http.guard import ApiError, Body, HttpContext, parse, reject
from serving.http.openai_schema import ChatRequest, CompletionRequest, Sampled, one_prompt
from serving.recording.session_ids import (
    CHAT_ID_PREFIX,
    COMPLETION_ID_PREFIX,
    REQUEST_ID_HEADER,
    body_session_id,
    header_value,
)
from serving.recording.stitching import Conversation, Remembered, link_events

log = logging.getLogger("liverl.serving.http")
DONE = b"data: [DONE]\n\n"
INLINE_STITCH_BYTES = 16 << 10  # a body up to this size has its conversation digested on the loop (~0.2 ms at most)


@dataclass
class Reply:
    """What a completion handler answers: a whole JSON `payload`, or the SSE `events` of a streamed `call`
    (whoever sends them closes the call when they end or the client leaves: that frees its lease)."""

    headers: dict[str, str]
    payload: dict | None = None
    events: AsyncIterator[bytes] | None = None
    call: Call | None = None


async def complete(ctx: HttpContext, principal: Principal, who: Caller, body: Body) -> Reply:
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
        return Reply(headers, events=_completion_events(call, cid, created, ctx.completions.model_name), call=call)
    await _run(call)
    logprobs = None
    if request.logprobs is not None:
        tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
        logprobs = {"tokens": tokens, "token_logprobs": call.logprobs, "top_logprobs": None, "text_offset": None}
    choice = {"index": 0, "text": call.text, "finish_reason": call.finish_reason, "logprobs": logprobs}
    return Reply(headers, {"id": cid, "object": "text_completion", "created": created,
                           "model": ctx.completions.model_name, "choices": [choice], "usage": _usage(call),
                           "liverl": _ext(call, call.token_ids, call.logprobs)})


async def chat(ctx: HttpContext, principal: Principal, who: Caller, body: Body) -> Reply:
    request = parse(ChatRequest, body, ctx, principal)
    _check_model(ctx, principal, body, request)
    slot = ctx.completions.router.champion
    if slot is None:
        raise ApiError(503, "no policy version is loaded yet: retry shortly", "server_error")
    messages = request.message_dicts()
    try:  # a chat template is code: render off the loop, and refuse what it cannot render
        prompt = await asyncio.to_thread(render_chat, slot.tokenizer, messages, request.tool_dicts())
    except Exception as error:
        raise reject(ctx, principal, body, BadRequest("bad-messages", f"messages could not be rendered: {error}",
                                                      "messages"), ChatRequest) from None
    _name(ctx, principal, body, request, who, "openai-chat", CHAT_ID_PREFIX)
    stitched = await stitch(ctx, who, body, messages)
    forced = request.forced_tool_call()
    call = await _begin(ctx, principal, body, request, who, prompt, None,
                        request.max_completion_tokens if request.max_completion_tokens is not None
                        else request.max_tokens, forced.opening if forced else "")
    remember = stitched_call(ctx, call, stitched)
    created, cid, headers = int(time.time()), call.request_id, _id_headers(call)
    if request.stream:
        return Reply(headers, events=_chat_events(call, request, cid, created, ctx.completions.model_name, remember),
                     call=call)
    await _run(call)
    tool_calls = reply_tool_calls(call, request.tool_dicts(), forced)
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls else call.reply_text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    remember(message)
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else call.finish_reason,
              "logprobs": _chat_logprobs(call) if request.logprobs else None}
    return Reply(headers, {"id": cid, "object": "chat.completion", "created": created,
                           "model": ctx.completions.model_name, "choices": [choice], "usage": _usage(call),
                           "liverl": _ext(call, call.token_ids, call.logprobs)})


# -- the steps both handlers share ------------------------------------------------------------------------


def _check_model(ctx: HttpContext, principal: Principal, body: Body, request: Sampled) -> None:
    name = ctx.completions.model_name
    if request.model not in ("", name):
        raise reject(ctx, principal, body, BadRequest("unknown-model", f"this model is not served here: use {name!r}",
                                                      "model"), type(request), status=404)


def _name(ctx: HttpContext, principal: Principal, body: Body, request: Sampled, who: Caller, api: str,
          id_prefix: str) -> None:
    """Fix the call's API, its request id (the reply's `id`) and, when no header or URL did, its session;
    the body's `user` (OpenAI's end-user id) names the user when no header did."""
    who.api = api
    if not who.user_id and isinstance(request.user, str):
        who.user_id = request.user
    who.request_id = f"{id_prefix}{secrets.token_hex(16)}"  # uuid4().hex's shape, a third the cost
    if not who.session_id:
        try:
            tenant = who.tenant_id or ctx.completions.default_tenant
            who.session_id = body_session_id(request.metadata, request.user,
                                             lambda user: ctx.completions.user_pseudonym(tenant, user))
        except BadRequest as error:
            raise reject(ctx, principal, body, error, type(request)) from None


def _id_headers(call: Call) -> dict[str, str]:
    return {names.META_POLICY_VERSION: call.version, names.META_SESSION_ID: header_value(call.session_id),
            REQUEST_ID_HEADER: header_value(call.request_id)}


async def stitch(ctx: HttpContext, who: Caller, body: Body, messages: list[dict[str, Any]]) -> Conversation | None:
    """Rule 6 of serving.recording.session_ids: a call that names no session and resends an earlier call's conversation and
    reply continues that call's session (serving.recording.stitching). The call's conversation (to remember once it has its
    reply), its `stitch` set when it continues one; None when stitching is off."""
    stitcher = ctx.completions.stitcher
    if stitcher is None:
        return None
    tenant = who.tenant_id or ctx.completions.default_tenant
    if body.size <= INLINE_STITCH_BYTES:  # microseconds; a long conversation's digests off the loop, as its prompt
        conversation = stitcher.conversation(tenant, who.user_id, messages)
    else:
        conversation = await asyncio.to_thread(stitcher.conversation, tenant, who.user_id, messages)
    if not who.session_id:  # an explicit id (header, URL, metadata, user, previous response) always wins
        conversation.stitch = stitcher.find(conversation, partial(_stitch_erased, ctx, tenant))
        if conversation.stitch is not None:
            who.session_id = conversation.stitch.session_id
    return conversation


def stitched_call(ctx: HttpContext, call: Call, conversation: Conversation | None) -> Callable[[dict[str, Any]], None]:
    """Record the tool links of a stitched call now; what remembers the call once its reply (the assistant message
    as a client sends it back) is known."""
    if conversation is None:
        return lambda reply: None
    completions, caller = ctx.completions, call.caller
    tenant = caller.tenant_id or completions.default_tenant
    stitch_found = conversation.stitch
    if stitch_found is not None and stitch_found.links and completions.recorder is not None \
            and not completions.opt_out.excludes(caller.tenant_id, caller.user_id):
        at_ms = int(call.started * 1000)
        for event in link_events(stitch_found, tenant, caller.session_id, caller.agent_role, caller.agent_id, at_ms):
            completions.recorder.record_event_later(partial(_redacted, completions, tenant, event), at_ms)

    version = key_version(completions, tenant)  # read as the call starts: a tenant erased while it runs replaces it

    def remember(reply: dict[str, Any]) -> None:
        if session_erased(completions, tenant, caller.session_id, version):
            return  # its session (or tenant) was erased before the reply: nothing of it is kept
        completions.stitcher.remember(conversation, reply, caller.session_id, call.request_id, version)
    return remember


def session_erased(completions, tenant: str, session_id: str, key_version: object) -> bool:
    """Whether a session kept in memory (as its records are keyed) or its tenant was erased since its key_version
    (`liverl forget` reaches what serving keeps too; serving.recording.erasure_sweep asks the same)."""
    subjects = getattr(completions.recorder, "subjects", None)
    if subjects is None:  # not recording: nothing of it is stored, and no key store says who was erased
        return False
    redactor = completions.redactor(tenant)
    keyed = redactor.redact_id(session_id) if redactor is not None else session_id
    return subjects.erased_since(tenant, keyed, key_version)


def _stitch_erased(ctx: HttpContext, tenant: str, kept: Remembered) -> bool:
    """Whether a remembered call's session (or its tenant) was erased since."""
    return session_erased(ctx.completions, tenant, kept.session_id, kept.key_version)


def key_version(completions, tenant: str) -> object:
    """The tenant's pseudonym key version, made now if the tenant has no key yet (a tenant's erasure replaces it),
    to tag what serving keeps in memory with; None when not recording."""
    subjects = getattr(completions.recorder, "subjects", None)
    return subjects.key_version(tenant) if subjects is not None else None


def _redacted(completions, tenant: str, event):
    redactor = completions.redactor(tenant)
    if redactor is not None:  # a tool result is the user's text: redacted as capture redacts it
        redactor.redact_message(event)
    return event


async def _begin(ctx: HttpContext, principal: Principal, body: Body, request: Sampled, who: Caller,
                 prompt: str | None, ids: list[int] | None, max_tokens: int | None, forced_text: str = "") -> Call:
    completions = ctx.completions
    try:
        sampling = completions.sampling(request.temperature, request.top_p, request.top_k, max_tokens, request.seed,
                                        request.stop)
        return await completions.begin(who, prompt, ids, sampling, forced_text)
    except BadRequest as error:
        raise reject(ctx, principal, body, error, type(request)) from None
    except RuntimeError as error:  # nothing loaded yet
        raise ApiError(503, f"{error}: retry shortly", "server_error") from error


def reply_tool_calls(call: Call, tools: list[dict[str, Any]] | None, forced: ForcedToolCall | None
                     ) -> list[dict[str, Any]]:
    """The tool calls of a finished call's reply (its forced opening, then its sampled text); [] for content.
    A forced call the policy did not complete is not pretended: [] (the reply goes out as content, with the
    engine's finish_reason), counted by API and logged in one line, without the reply's text."""
    text = call.reply_text
    if forced is not None:  # the call ends with its object: a tail in the closing token's text is not part of it
        text = text[:json_object_end(text) or len(text)]
    calls = parse_tool_calls(text, tools)
    if forced is not None and not forced.met_by(calls):
        call.completions.metrics.forced_tool_call_unmet.labels(call.caller.api).inc()
        log.warning("forced tool call not completed: request %s (%s) asked for %s, the reply (%d sampled tokens, "
                    "finish_reason %s) is no such call: sent as content", call.request_id, call.caller.api,
                    repr(forced.name) if forced.name else "any offered tool", len(call.token_ids), call.finish_reason)
        return []
    return calls


async def _run(call: Call) -> None:
    try:
        await call.run()
    except DeadlineExceeded as error:
        raise ApiError(504, str(error), "timeout", "deadline-exceeded") from None


async def _completion_events(call: Call, cid: str, created: int, model_name: str) -> AsyncIterator[bytes]:
    try:
        async for piece in call.stream():
            choice = {"index": 0, "text": piece.text, "finish_reason": piece.delta.finish_reason, "logprobs": None}
            yield _sse({"id": cid, "object": "text_completion", "created": created, "model": model_name,
                        "choices": [choice], "liverl": _ext(call, piece.delta.token_ids, piece.delta.logprobs)})
    except DeadlineExceeded as error:
        yield _sse({"error": {"message": str(error), "type": "timeout", "param": None, "code": "deadline-exceeded"}})
    yield DONE


async def _chat_events(call: Call, request: ChatRequest, cid: str, created: int, model_name: str,
                       remember: Callable[[dict[str, Any]], None]) -> AsyncIterator[bytes]:
    def chunk(delta: dict, finish: str | None, ids=(), logprobs=()) -> bytes:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_name,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                     "liverl": _ext(call, list(ids), list(logprobs))})

    yield chunk({"role": "assistant", "content": ""}, None)
    try:
        tools = request.tool_dicts()
        if tools:  # a tool call is only known once the text is complete: send it whole
            await call.run()
            tool_calls = reply_tool_calls(call, tools, request.forced_tool_call())
            if tool_calls:
                remember({"role": "assistant", "content": None, "tool_calls": tool_calls})
                delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)]}
                yield chunk(delta, "tool_calls", call.token_ids, call.logprobs)
            else:
                remember({"role": "assistant", "content": call.reply_text})
                yield chunk({"content": call.reply_text}, call.finish_reason, call.token_ids, call.logprobs)
        else:
            async for piece in call.stream():
                yield chunk({"content": piece.text} if piece.text else {}, piece.delta.finish_reason,
                            piece.delta.token_ids, piece.delta.logprobs)
            remember({"role": "assistant", "content": call.text})
    except DeadlineExceeded as error:
        yield _sse({"error": {"message": str(error), "type": "timeout", "param": None, "code": "deadline-exceeded"}})
    yield DONE


def _usage(call: Call) -> dict:
    return {"prompt_tokens": len(call.prompt_token_ids), "completion_tokens": len(call.token_ids),
            "total_tokens": len(call.prompt_token_ids) + len(call.token_ids)}


def _ext(call: Call, token_ids: list[int], logprobs: list[float]) -> dict:
    return {"policy_version": call.version, "request_id": call.request_id, "session_id": call.session_id,
            "token_ids": list(token_ids), "logprobs": list(logprobs)}


def _chat_logprobs(call: Call) -> dict:
    tokens = call.slot.tokenizer.convert_ids_to_tokens(call.token_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, call.logprobs)]}


def _sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
