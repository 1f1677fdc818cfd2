"""Unexpected failures met on client input, logged so that they can be found without storing what was sent.

A traceback's last line quotes the exception's message, and messages often quote the value that caused
them (a card number in a ValueError, an email in a KeyError). So no stage logs a traceback for such a
failure: one error line holds the exception's type, its message redacted, and the file and line of each
frame, which is enough to find the bug.
"""

from __future__ import annotations

import functools
import json
import logging
import traceback
from collections.abc import Callable


def log_unexpected(log: logging.Logger, what: str, error: BaseException,
                   redact: Callable[[str], str] | None = None) -> None:
    """One error line for `error`; redact: the stage's configured redaction (default: the built-in detectors)."""
    redact = redact or _default_redactor().redact_text
    frames = [f"{frame.filename}:{frame.lineno} {frame.name}" for frame in traceback.extract_tb(error.__traceback__)]
    log.error(json.dumps({"msg": what, "error_type": type(error).__name__, "detail": redact(str(error)[:2000]),
                          "where": frames[-8:]}))


@functools.cache
def _default_redactor():
    from liverl.redaction.redactor import Redactor

    return Redactor()
