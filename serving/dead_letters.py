"""Dead letters of refused requests: a summary that says what was wrong, never what was sent.

A request body may hold anything a user typed, API keys and personal data included, so the dead-letter
topic gets only metadata: the API, the body's size, which contract fields it had (unknown field names
are counted, not listed: a name can be a secret too) and which fields were wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


def summary(api: str, body_bytes: int, fields: Iterable[str] = (), known_fields: Iterable[str] = (),
            error_params: Iterable[str] = ()) -> bytes:
    """The dead letter's payload: JSON metadata of the refused request."""
    known = set(known_fields)
    given = [str(f) for f in fields]
    return json.dumps({
        "api": api,
        "body_bytes": body_bytes,
        "fields": sorted(f for f in given if f in known),
        "unknown_fields": sum(1 for f in given if f not in known),
        "error_params": sorted({p for p in error_params if p.split(".")[0] in known})[:20],
    }, separators=(",", ":")).encode()
