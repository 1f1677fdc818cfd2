"""POST /v1/responses: OpenAI's Responses API, served and recorded exactly as a chat completion.

The same steps as /v1/chat/completions (serving.http.completions), in the same order, behind the same guards
(serving.http.asgi_routes): a strict parse, the model check, the conversation rendered through the chat template
off the loop, the session named (`_name`: header, per-session URL, metadata, the `user` pseudonym, else a
session of its own), the version leased and the prompt tokenized (`_begin`), and one ModelCall recorded
with api "openai-responses" whose request id is the response's `id`.

previous_response_id continues a response this server made for the same tenant (serving.http.responses.state):
its conversation is the start of the prompt and its session is the continuation's, unless a header, the URL
or metadata names another. An unknown, expired or other tenant's id is one 404, never a hint of which.
A request that resends the whole conversation instead is stitched to its session like a chat call
(serving.recording.stitching); either way, function_call_outputs answering the previous reply's calls are recorded as
tool results linked to those calls.

A forced tool_choice ("required" or a named function) is served as chat's (serving.http.completions): the reply
opens as the forced JSON call, recorded as the end of the prompt; a reply that does not complete it is output as a
message, with the engine's finish_reason, and counted in liverl_serving_forced_tool_call_unmet.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from liverl.contracts.chat import render_chat
from serving.auth import Principal
from serving.generation import BadRequest, Call, Caller, DeadlineExceeded
from serving.http.completions import (
    Reply,
    _begin,
    _check_model,
    _ext,
    _id_headers,
    _name,
    _run,
    key_version,
    reply_tool_calls,
    session_erased,
    stitch,
    stitched_call,
)
from serving.http.guard import ApiError, Body, HttpContext, parse, reject
from serving.http.responses.items import (
    RESPONSE_ID_PREFIX,
    conversation,
    function_call_item,
    message_item,
    output_of,
    output_text,
    prompt_messages,
    response_object,
    token_logprobs,
)
from serving.http.responses.schema import ResponsesRequest, unsupported
from serving.http.responses.state import ResponseStore, StoredResponse
from serving.recording.session_ids import SESSION_METADATA_KEY
from serving.recording.stitching import Stitch, tool_links

API = "openai-responses"


class ResponsesApi:
    """The handler of POST /v1/responses, holding the responses kept for previous_response_id."""

    def __init__(self, store: ResponseStore):
        self.store = store

    async def __call__(self, ctx: HttpContext, principal: Principal, who: Caller, body: Body) -> Reply:
        request = parse(ResponsesRequest, body, ctx, principal)
        _check_model(ctx, principal, body, request)
        refusal = unsupported(request)
        if refusal is not None:
            raise reject(ctx, principal, body, refusal, ResponsesRequest)
        tenant = who.tenant_id or ctx.completions.default_tenant
        previous = self._previous(ctx, principal, body, request, tenant)
        try:
            messages, call_ids = conversation(request, previous)
        except BadRequest as error:
            raise reject(ctx, principal, body, error, ResponsesRequest) from None
        rendered = prompt_messages(request, messages)
        prompt = await _render(ctx, principal, body, request, rendered)
        if previous is not None and not who.session_id and not (request.metadata or {}).get(SESSION_METADATA_KEY):
            who.session_id = previous.session_id  # the conversation's session: one trajectory
        _name(ctx, principal, body, request, who, API, RESPONSE_ID_PREFIX)
        stitched = await stitch(ctx, who, body, rendered)  # a whole conversation resent, without previous_response_id
        if stitched is not None and previous is not None and who.session_id == previous.session_id:
            known = len(rendered) - len(messages) + len(previous.messages)  # the instructions, then what it kept
            stitched.stitch = Stitch(previous.session_id, request.previous_response_id, known,
                                     tuple(tool_links(rendered, known)))  # its tool results linked, as stitched
        forced = request.forced_tool_call()
        call = await _begin(ctx, principal, body, request, who, prompt, None, request.max_output_tokens,
                            forced.opening if forced else "")
        keep = self._keeper(ctx, request, tenant, call, messages, call_ids, stitched_call(ctx, call, stitched))
        created, headers = int(time.time()), _id_headers(call)
        if request.stream:
            return Reply(headers, events=_events(call, request, created, ctx.completions.model_name, keep), call=call)
        await _run(call)
        tool_calls = reply_tool_calls(call, request.tool_dicts(), forced)
        logprobs = token_logprobs(call, call.token_ids, call.logprobs) if request.wants_logprobs else None
        output, reply_message = output_of(call, tool_calls, logprobs)
        keep(reply_message, tool_calls)
        return Reply(headers, response_object(request, call, created, ctx.completions.model_name,
                                              _status(call, tool_calls), output,
                                              _ext(call, call.token_ids, call.logprobs)))

    def _previous(self, ctx: HttpContext, principal: Principal, body: Body, request: ResponsesRequest,
                  tenant: str) -> StoredResponse | None:
        if not request.previous_response_id:
            return None
        previous = self.store.get(tenant, request.previous_response_id)
        if previous is not None and _erased(ctx, tenant, previous):  # `liverl forget` reaches what is kept too
            self.store.drop(tenant, request.previous_response_id)
            previous = None
        if previous is None:  # unknown, expired, evicted, erased or another tenant's: the same answer for each
            raise reject(ctx, principal, body, BadRequest(
                "unknown-previous-response", f"previous_response_id {request.previous_response_id[:80]!r} is not a "
                f"response this server keeps for your tenant (responses are kept {self.store.ttl_s:g} s, the most "
                "recent ones only, never across tenants or restarts, and not with store false): send the whole "
                "conversation as input instead", "previous_response_id"), ResponsesRequest, status=404)
        return previous

    def _keeper(self, ctx: HttpContext, request: ResponsesRequest, tenant: str, call: Call, messages: list[dict],
                call_ids: frozenset[str], remember: Callable[[dict], None]) -> Callable[[dict, list[dict]], None]:
        """What keeps the finished response for previous_response_id (nothing under store false) and remembers it
        for stitching (serving.recording.stitching: also under store false, which keeps no text)."""
        version = key_version(ctx.completions, tenant)  # as the call starts: a tenant erased meanwhile replaces it

        def keep(reply_message: dict, tool_calls: list[dict]) -> None:
            remember(reply_message)
            if request.keeps and not session_erased(ctx.completions, tenant, call.session_id, version):
                ids = call_ids | {c["id"] for c in tool_calls}
                self.store.put(tenant, call.request_id,
                               self.store.new(call.session_id, (*messages, reply_message), ids, version))
        return keep


def _erased(ctx: HttpContext, tenant: str, previous: StoredResponse) -> bool:
    """Whether the kept conversation's session (as its records are keyed) or its tenant was erased since."""
    return session_erased(ctx.completions, tenant, previous.session_id, previous.key_version)


async def _render(ctx: HttpContext, principal: Principal, body: Body, request: ResponsesRequest,
                  rendered: list[dict[str, Any]]) -> str:
    """The prompt of `rendered` (prompt_messages: the instructions, then the conversation)."""
    slot = ctx.completions.router.champion
    if slot is None:
        raise ApiError(503, "no policy version is loaded yet: retry shortly", "server_error")
    try:  # a chat template is code: render off the loop, and refuse what it cannot render (as chat does)
        return await asyncio.to_thread(render_chat, slot.tokenizer, rendered, request.tool_dicts())
    except Exception as error:
        raise reject(ctx, principal, body, BadRequest("bad-messages", f"input could not be rendered: {error}",
                                                      "input"), ResponsesRequest) from None


def _status(call: Call, tool_calls: list[dict]) -> str:
    return "incomplete" if call.finish_reason == "length" and not tool_calls else "completed"


async def _events(call: Call, request: ResponsesRequest, created: int, model_name: str,
                  keep: Callable[[dict, list[dict]], None]) -> AsyncIterator[bytes]:
    """The Responses stream: created, in_progress, each output item (added, its deltas, done), then completed
    (incomplete when max_output_tokens cut the text). With tools offered, a call is only known once the text is
    whole, so the output is sent whole, as chat's stream does; without, text deltas follow the tokens."""
    numbers = itertools.count()

    def event(kind: str, **fields) -> bytes:
        payload = {"type": kind, "sequence_number": next(numbers), **fields}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    started = response_object(request, call, created, model_name, "in_progress", [])
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    try:
        tools = request.tool_dicts()
        tool_calls: list[dict] = []
        if tools:
            await call.run()
            tool_calls = reply_tool_calls(call, tools, request.forced_tool_call())
        logprobs = token_logprobs(call, call.token_ids, call.logprobs) if request.wants_logprobs else None
        output: list[dict] = []
        for index, call_item in enumerate(tool_calls):
            item = function_call_item(call_item)
            yield event("response.output_item.added", output_index=index, item={**item, "arguments": "",
                                                                                "status": "in_progress"})
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                        name=item["name"], arguments=item["arguments"])
            yield event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        if not tool_calls:
            item_id = f"msg_{secrets.token_hex(16)}"
            part = {"item_id": item_id, "output_index": 0, "content_index": 0}
            yield event("response.output_item.added", output_index=0, item=message_item(item_id, "in_progress", []))
            yield event("response.content_part.added", **part, part=output_text("", None))
            if tools:  # the text is already whole
                yield event("response.output_text.delta", **part, delta=call.reply_text, logprobs=logprobs or [],
                            liverl=_ext(call, call.token_ids, call.logprobs))
            else:
                async for piece in call.stream():
                    delta = piece.delta
                    yield event("response.output_text.delta", **part, delta=piece.text,
                                logprobs=token_logprobs(call, delta.token_ids, delta.logprobs)
                                if request.wants_logprobs else [],
                                liverl=_ext(call, delta.token_ids, delta.logprobs))
                logprobs = token_logprobs(call, call.token_ids, call.logprobs) if request.wants_logprobs else None
            status = _status(call, tool_calls)
            text_part = output_text(call.reply_text, logprobs)
            yield event("response.output_text.done", **part, text=call.reply_text, logprobs=logprobs or [])
            yield event("response.content_part.done", **part, part=text_part)
            item = message_item(item_id, status, [text_part])
            yield event("response.output_item.done", output_index=0, item=item)
            output.append(item)
            keep({"role": "assistant", "content": call.reply_text}, [])
        else:
            keep({"role": "assistant", "content": None, "tool_calls": tool_calls}, tool_calls)
        status = _status(call, tool_calls)
        done = response_object(request, call, created, model_name, status, output,
                               _ext(call, call.token_ids, call.logprobs))
        yield event("response.completed" if status == "completed" else "response.incomplete", response=done)
    except DeadlineExceeded as error:
        yield event("error", code="deadline-exceeded", message=str(error), param=None)
        failed = response_object(request, call, created, model_name, "failed", [])
        failed["error"] = {"code": "server_error", "message": str(error)}
        yield event("response.failed", response=failed)
