"""What a refused request leaves behind: a summary that says what was wrong, never what was sent.

A refused body may be compressed (gzip, deflate), binary (protobuf) or cut off: redaction cannot see
into it, so its dead letter carries its sizes, its declared type and encoding and the reason, not its
bytes. Unexpected failures are logged the same way: the error's type and a redacted message, never the
value that caused them nor a traceback whose last line quotes it.
"""

from __future__ import annotations

import json
import logging
import traceback


def request_summary(api: str, reason: str, body_bytes: int, content_type: str = "", content_encoding: str = "",
                    **sizes: int) -> bytes:
    """The dead-letter payload of a request refused whole (JSON): sizes and headers, no content."""
    summary = {"summary_of_refused_request": True, "api": api, "reason": reason, "body_bytes": body_bytes,
               "content_type": content_type[:100], "content_encoding": content_encoding[:100], **sizes}
    return json.dumps(summary, sort_keys=True).encode()


def log_unexpected(log: logging.Logger, what: str, error: BaseException, redact) -> None:
    """One warning for a bug met on client input: the error's type, its message redacted, and where it
    was raised (file and line of each frame), so it can be found without storing what the client sent."""
    frames = [f"{frame.filename}:{frame.lineno} {frame.name}" for frame in traceback.extract_tb(error.__traceback__)]
    log.error(json.dumps({"msg": what, "error_type": type(error).__name__, "detail": redact(str(error)[:2000]),
                          "where": frames[-8:]}))
