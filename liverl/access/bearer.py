"""Bearer secrets at the edge: read "authorization: Bearer <secret>", find whose secret it is.

The match compares the presented secret with every known one (hmac.compare_digest), so the time it
takes reveals neither a matching prefix nor which entry matched.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Generic, TypeVar

Owner = TypeVar("Owner")


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of a "Bearer <secret>" header value (scheme case-insensitive); None when the header is
    missing, names another scheme or carries no secret."""
    if not authorization:
        return None
    scheme, _, secret = authorization.strip().partition(" ")
    secret = secret.strip()
    return secret if scheme.lower() == "bearer" and secret else None


class SecretTable(Generic[Owner]):
    """Known secrets, each naming its owner (a tenant, a principal); the first entry wins a duplicate."""

    def __init__(self, entries: Iterable[tuple[str, Owner]]):
        self._entries = [(secret.encode(), owner) for secret, owner in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def owner_of(self, secret: str | None) -> Owner | None:
        """The owner of `secret`, or None when it is empty or unknown."""
        if not secret:
            return None
        presented, found, matched = secret.encode(), None, False
        for expected, owner in self._entries:  # every entry, matched or not: constant time in the table's size
            if hmac.compare_digest(presented, expected) and not matched:
                found, matched = owner, True
        return found
