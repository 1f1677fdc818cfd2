"""What a refused request leaves on the dead-letter topic: a summary that says what was wrong, never what was sent
(docs/architecture.md, contract 1).

Ingest and serving both refuse requests whole (too large, undecodable, an unknown field, a wrong value) and
dead-letter this one payload (inside liverl/io/records.py's envelope, whose `source` says which stage refused).
A request body may hold anything a user typed, API keys and personal data included, and may be compressed,
binary or cut off so that redaction cannot see into it: so the payload holds only metadata: the API, the
reason, the body's sizes, its declared type and encoding, which contract fields it had (unknown field names are
counted, not listed: a name can be a secret too) and which fields were wrong.

Produced by ingest (ingest/http_api.py, ingest/grpc_api.py) and serving (serving/http/guard.py,
serving/grpc_api.py); read by whoever reads the dead-letter topic (`liverl topics dead-letters`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields

MARKER = "summary_of_refused_request"  # tells this summary from a dead letter that carries a redacted event
MAX_HEADER_CHARS = 100  # a declared Content-Type or Content-Encoding is cut to this: the client wrote it
MAX_ERROR_PARAMS = 20


@dataclass(frozen=True)
class RefusedRequest:
    api: str  # "http", "grpc" or "otlp": the API the request came in on
    reason: str  # the refusal's code, as the dead letter's envelope names it
    body_bytes: int  # the body's size as received (or as declared, for a body refused unread)
    inflated_bytes: int = 0  # a compressed body's size once inflated (0: not inflated)
    content_type: str = ""  # as declared by the client, cut to MAX_HEADER_CHARS
    content_encoding: str = ""
    fields: tuple[str, ...] = ()  # the contract's fields the body had, sorted
    unknown_fields: int = 0  # how many other field names it had (never their names)
    error_params: tuple[str, ...] = ()  # the contract's fields that were wrong, sorted

    @classmethod
    def of(cls, api: str, reason: str, body_bytes: int, *, inflated_bytes: int = 0, content_type: str = "",
           content_encoding: str = "", fields: Iterable[str] = (), known_fields: Iterable[str] = (),
           error_params: Iterable[str] = ()) -> RefusedRequest:
        """The summary of a request: `fields` (the body's field names) are kept only where they are among
        `known_fields` (the contract's), the others counted; an error param is kept only where its first
        dotted part is a known field."""
        known = set(known_fields)
        given = [str(f) for f in fields]
        return cls(api=api, reason=reason, body_bytes=body_bytes, inflated_bytes=inflated_bytes,
                   content_type=content_type[:MAX_HEADER_CHARS], content_encoding=content_encoding[:MAX_HEADER_CHARS],
                   fields=tuple(sorted({f for f in given if f in known})),
                   unknown_fields=sum(1 for f in given if f not in known),
                   error_params=tuple(sorted({p for p in error_params if p.split(".")[0] in known})[:MAX_ERROR_PARAMS]))

    def encode(self) -> bytes:
        """The dead letter's payload: JSON, keys sorted."""
        return json.dumps({MARKER: True, **asdict(self)}, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes) -> RefusedRequest:
        """A payload back, including the two shapes written before this contract: ingest's (MARKER, sizes and
        headers) and serving's (no MARKER, fields): what a shape lacks takes its default, keys it does not know
        are ignored. ValueError: not a refused request's summary (a dead letter's payload may be a redacted
        event instead)."""
        document = json.loads(payload)
        if not isinstance(document, dict) or "api" not in document or "body_bytes" not in document:
            raise ValueError("not a refused request's summary: it needs at least 'api' and 'body_bytes'")
        known = {f.name for f in dataclass_fields(cls)}
        values = {name: value for name, value in document.items() if name in known}
        for name in ("fields", "error_params"):
            values[name] = tuple(values.get(name, ()))
        values.setdefault("reason", "")
        return cls(**values)
