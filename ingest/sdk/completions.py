"""The ids of a served completion, read from whatever the product holds after calling serving.

Serving answers every call with the ids an SDK event links to (serving/recording/session_ids.py): the reply's `id`
is the recorded ModelCall's request id, and the body's "liverl" extension names its session. A call that
named no session is a one-call session whose session id is that same `id`. The SDK takes any of:
- the `openai` client's reply (ChatCompletion, Completion, or a streamed chunk): its `id` and `liverl`;
- the reply's JSON body as a dict;
- serving's gRPC GenerateResponse (its `request_id`);
- a bare id string (taken as a one-call session's id, which is its request id too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

ONE_CALL_PREFIXES = ("chatcmpl-", "cmpl-")  # the ids serving mints for the OpenAI-compatible API


@dataclass(frozen=True)
class CompletionRef:
    request_id: str
    session_id: str
    created_ms: int = 0  # when serving answered, 0: unknown

    @property
    def one_call(self) -> bool:
        """A call that named no session: its own session, with nothing recorded for it but the ModelCall."""
        return self.session_id == self.request_id


def completion_ref(reply: object) -> CompletionRef:
    """The ids of `reply` (see the module docstring); ValueError when it holds no request id."""
    if isinstance(reply, CompletionRef):
        return reply
    if isinstance(reply, str):
        return CompletionRef(_checked(reply), reply)
    body = reply if isinstance(reply, Mapping) else _fields(reply)
    extension = body.get("liverl") if isinstance(body.get("liverl"), Mapping) else {}
    request_id = str(extension.get("request_id") or body.get("id") or body.get("request_id") or "")
    created = body.get("created")
    return CompletionRef(_checked(request_id), str(extension.get("session_id") or request_id),
                         int(created) * 1000 if isinstance(created, int) and created > 0 else 0)


def request_id_of(reply: object) -> str:
    """What a tool call or summary links to: a request id given as is, or the request id of a reply."""
    return reply if isinstance(reply, str) else completion_ref(reply).request_id


def one_call_session(session_id: str) -> bool:
    """Whether a bare session id is one serving minted for a call that named no session."""
    return session_id.startswith(ONE_CALL_PREFIXES)


def fixed_event_id(session_id: str, what: str) -> str:
    """The same event id wherever the SDK records this session's `what` (its start, its end), so a one-call
    session opened by several feedback calls, in several processes, is stored once (the service and the
    pipelines drop repeated event ids)."""
    return f"{what}-" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _fields(reply: object) -> dict:
    extra = getattr(reply, "model_extra", None) or {}  # pydantic (the openai client): unknown fields land here
    return {"id": getattr(reply, "id", None), "request_id": getattr(reply, "request_id", None),
            "created": getattr(reply, "created", None), "liverl": extra.get("liverl") or getattr(reply, "liverl", None)}


def _checked(request_id: str) -> str:
    if not request_id:
        raise ValueError("this reply holds no request id: pass the reply serving returned (or its `id`), e.g. "
                         "session.tool_call(..., request_id=reply) or capture.feedback(reply, ...)")
    return request_id
