"""Responses API items to chat messages and back, and the response object the OpenAI SDK parses.

A Responses conversation is rendered through the policy's chat template exactly as the same conversation
sent to /v1/chat/completions would be: `instructions` become a leading system message (they are not carried
over by previous_response_id, as in OpenAI's API), a message item a message, consecutive function_call items
one assistant message with tool_calls, and a function_call_output a tool message answering its call_id.
"""

from __future__ import annotations

import secrets
from typing import Any

from serving.generation import BadRequest, Call
from serving.http.responses.schema import (
    FunctionCallItem,
    FunctionCallOutputItem,
    NamedFunctionChoice,
    ResponsesRequest,
)
from serving.http.responses.state import StoredResponse

RESPONSE_ID_PREFIX = "resp_"  # the response's id IS the recorded ModelCall's request id, as chat's chatcmpl- ids


def conversation(request: ResponsesRequest, previous: StoredResponse | None
                 ) -> tuple[list[dict[str, Any]], frozenset[str]]:
    """The conversation so far as chat messages (the previous response's, then this input) and the function call
    ids it holds. BadRequest for a function_call_output that answers no call of the conversation."""
    messages = list(previous.messages) if previous else []  # the dicts are shared with the stored response
    call_ids = set(previous.call_ids) if previous else set()
    for index, item in enumerate(request.input):
        if isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one turn's calls: one message (copied, not changed)
                messages[-1] = {**last, "tool_calls": [*(last.get("tool_calls") or []), call]}
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            call_ids.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem):
            if item.call_id not in call_ids:
                raise BadRequest("unknown-call-id", f"input item {index} answers call_id {item.call_id[:64]!r}, which "
                                 "no function_call of this conversation made: send the function_call item before "
                                 "its output, or continue the response that made it with previous_response_id",
                                 f"input.{index}.call_id")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        else:
            messages.append({"role": item.role, "content": item.content})
    return messages, frozenset(call_ids)


def prompt_messages(request: ResponsesRequest, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the template renders: this request's instructions first, then the conversation."""
    return ([{"role": "system", "content": request.instructions}] if request.instructions else []) + messages


def output_of(call: Call, tool_calls: list[dict[str, Any]], logprobs: list[dict] | None
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A finished call's output items and the assistant message a continuation renders it as.
    tool_calls: chat's tool calls parsed from its text ([] for a text answer)."""
    if tool_calls:
        items = [function_call_item(c) for c in tool_calls]
        return items, {"role": "assistant", "content": None, "tool_calls": tool_calls}
    item = message_item(f"msg_{secrets.token_hex(16)}", "incomplete" if call.finish_reason == "length" else "completed",
                        [output_text(call.reply_text, logprobs)])
    return [item], {"role": "assistant", "content": call.reply_text}


def function_call_item(call: dict[str, Any], arguments: str | None = None, status: str = "completed") -> dict:
    function = call["function"]
    return {"type": "function_call", "id": f"fc_{call['id'].removeprefix('call_')}", "call_id": call["id"],
            "name": function["name"], "arguments": function["arguments"] if arguments is None else arguments,
            "status": status}


def message_item(item_id: str, status: str, content: list[dict]) -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def output_text(text: str, logprobs: list[dict] | None) -> dict:
    part = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def token_logprobs(call: Call, token_ids: list[int], logprobs: list[float]) -> list[dict]:
    """Responses' logprobs of sampled tokens (the only ones recorded: top_logprobs is refused)."""
    tokens = call.slot.tokenizer.convert_ids_to_tokens(token_ids)
    return [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
            for t, lp in zip(tokens, logprobs)]


def response_object(request: ResponsesRequest, call: Call, created: int, model_name: str, status: str,
                    output: list[dict], ext: dict | None = None) -> dict[str, Any]:
    """The Response as the OpenAI SDK parses it; `usage` and liverl's extension (`ext`: the recorded tokens)
    once the call is done. The sampling values are those applied and recorded."""
    body: dict[str, Any] = {
        "id": call.request_id, "object": "response", "created_at": created, "status": status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions, "max_output_tokens": call.sampling.max_tokens, "model": model_name,
        "output": output, "parallel_tool_calls": True, "previous_response_id": request.previous_response_id,
        "reasoning": None, "store": request.keeps, "temperature": call.sampling.temperature,
        "top_p": call.sampling.top_p, "text": {"format": {"type": "text"}},
        "tool_choice": request.tool_choice.model_dump() if isinstance(request.tool_choice, NamedFunctionChoice)
        else request.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in request.tools or ()], "truncation": "disabled",
        "metadata": request.metadata or {}, "usage": None, "user": None,
    }
    if ext is not None:
        prompt, completion = len(call.prompt_token_ids), len(call.token_ids)
        body["usage"] = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                         "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": prompt + completion}
        body["liverl"] = ext
    return body
