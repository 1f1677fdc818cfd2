"""API keys: one check for both APIs. Keys travel as "authorization: Bearer KEY"."""

from __future__ import annotations

import hmac


class Keys:
    def __init__(self, api_keys: list[str], admin_keys: list[str]):
        self.api_keys = [k for k in api_keys if k]
        self.admin_keys = [k for k in admin_keys if k]

    def allows_use(self, authorization: str | None) -> bool:
        """Generate, models, info: any API or admin key; open when no key is configured at all."""
        if not self.api_keys and not self.admin_keys:
            return True
        return _matches(_bearer(authorization), self.api_keys + self.admin_keys)

    def allows_admin(self, authorization: str | None) -> bool:
        """Force swap, rollback: an admin key; open only when no key of either kind is configured."""
        if not self.api_keys and not self.admin_keys:
            return True
        return _matches(_bearer(authorization), self.admin_keys)


def _bearer(authorization: str | None) -> str:
    if not authorization:
        return ""
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _matches(token: str, keys: list[str]) -> bool:
    # Constant-time comparison against every key, so timing does not reveal a prefix.
    return bool(token) and any(hmac.compare_digest(token.encode(), key.encode()) for key in keys)
