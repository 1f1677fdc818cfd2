"""Which session an HTTP completion belongs to, named in any way an unmodified OpenAI client can name it.

Strongest first (the first one present wins; the others are ignored):
1. the x-liverl-session-id header;
2. the per-session base URL, /s/<session_id>/v1/... (for a product that can set only its base URL);
3. the body's metadata {"liverl_session_id": "..."} (OpenAI's own request-metadata field);
4. for POST /v1/responses, previous_response_id: the session of the response it continues (serving.http.responses);
5. the body's `user` (OpenAI's end-user id): all of that user's calls become ONE session, so rely on it
   only when the product sets `user` per conversation. The session is named by the user's keyed pseudonym
   ("u-<hex>", liverl.privacy.pseudonyms), never by the id as given: a session id reaches records, the table
   and the audit, and an end-user id is personal data;
6. the conversation (chat and Responses calls, unless serving.stitch_sessions is false): a call whose input
   begins with an earlier call's input and reply, for the same tenant (and end user, when a header names one),
   continues that call's session, so a framework that resends the whole conversation on each call is recorded
   as one session; its tool results are recorded linked to the tool calls of that reply (serving.recording.stitching);
7. nothing: the call is a session of its own (a one-call session) whose id is its completion id, `reply.id`
   (Completions.begin names it). The SDK's `feedback(reply, ...)` makes such a session trainable.

Every response says what was decided, so an SDK call can link to it: the body's `id` is the request id
of the recorded ModelCall, and the headers below repeat the session and request ids.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from urllib.parse import quote

from liverl.contracts import names
from serving.generation import BadRequest, check_id

REQUEST_ID_HEADER = names.META_REQUEST_ID  # response header: the recorded ModelCall's request id (= reply.id)
SESSION_METADATA_KEY = "liverl_session_id"
CHAT_ID_PREFIX = "chatcmpl-"  # request ids serving mints, shaped like OpenAI's completion ids
COMPLETION_ID_PREFIX = "cmpl-"
# Header values are latin-1 on the wire: anything outside printable ASCII (and "%" itself) is percent-encoded.
_HEADER_SAFE = "".join(c for c in string.printable if c.isprintable() and c != "%")


def body_session_id(metadata: dict[str, str] | None, user: object, user_pseudonym: Callable[[str], str]) -> str:
    """The session the body names (rules 3 and 5), or ""; BadRequest when the name is not a valid id.
    user_pseudonym: the tenant's keyed pseudonym of a user id (rule 5 names the session by it)."""
    if metadata and metadata.get(SESSION_METADATA_KEY):
        return check_id(metadata[SESSION_METADATA_KEY], f"metadata.{SESSION_METADATA_KEY}")
    if isinstance(user, str) and user:
        return user_pseudonym(check_id(user, "user"))
    return ""


def path_session_id(path_params: dict[str, str]) -> str:
    """The session of a per-session base URL (rule 2), or ""."""
    value = path_params.get("session_id", "")
    if value == "":
        return ""
    if not value.strip():
        raise BadRequest("bad-id", "the session id in /s/<session_id>/v1 is blank: name a session", "session_id")
    return check_id(value, "session_id")


def header_value(value: str) -> str:
    """An id as a header value: unchanged when printable ASCII without "%", else percent-encoded UTF-8."""
    if value.isascii() and value.isprintable() and "%" not in value:  # nearly every id: no quote() call
        return value
    return quote(value, safe=_HEADER_SAFE)
