"""What a refused request leaves behind: a summary that says what was wrong, never what was sent.

A refused body may be compressed (gzip, deflate), binary (protobuf) or cut off: redaction cannot see
into it, so its dead letter carries its sizes, its declared type and encoding and the reason, not its
bytes. Unexpected failures are logged the same way (liverl/redaction/error_log.py).
"""

from __future__ import annotations

import json


def request_summary(api: str, reason: str, body_bytes: int, content_type: str = "", content_encoding: str = "",
                    **sizes: int) -> bytes:
    """The dead-letter payload of a request refused whole (JSON): sizes and headers, no content."""
    summary = {"summary_of_refused_request": True, "api": api, "reason": reason, "body_bytes": body_bytes,
               "content_type": content_type[:100], "content_encoding": content_encoding[:100], **sizes}
    return json.dumps(summary, sort_keys=True).encode()
