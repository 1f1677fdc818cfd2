"""The erasure audit log: one JSON line per `liverl forget` (who, when, what, counts; no personal data).

The subject is named only by its scope and tenant and by the erasure's own random id: the log must prove
that an erasure happened and what it removed without keeping what identified the person.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def append(path: Path, entry: dict) -> None:
    """Append entry as one line (0600 file, 0700 folder), fsync'd before returning."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(descriptor, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []
