"""Keyed pseudonyms per tenant: the stand-ins for user and session ids that survive redaction.

HMAC-SHA256 under the tenant's pseudonym key from the key store: the same id of the same tenant always gets
the same pseudonym (so a user's rows can be found and `liverl forget` can name them), two tenants' equal ids
get unrelated ones, and nobody without the key can test a guess.
"""

from __future__ import annotations

import hashlib
import hmac

from liverl.privacy.keystore import SubjectKeyStore

DIGEST_HEX = 32  # 128 bits


class Pseudonyms:
    def __init__(self, store: SubjectKeyStore, cache_size: int = 65_536):
        self.store = store
        self._tenant_keys: dict[str, bytes] = {}
        self._cache_size = cache_size
        self._cache: dict[tuple[str, str, str], str] = {}  # cleared when full: cheaper than an LRU per lookup

    def user(self, tenant: str, user_id: str) -> str:
        """"u-<hex>": the user's pseudonym; "" for no user. A value that is one already is kept."""
        if not user_id or _is_pseudonym(user_id, "u"):
            return user_id
        return self._make(tenant, "u", user_id)

    def session(self, tenant: str, session_id: str) -> str:
        """"s-<hex>": the subject id of the session (its key's name in the key store)."""
        return self._make(tenant, "s", session_id)

    def _make(self, tenant: str, kind: str, value: str) -> str:
        cached = self._cache.get((tenant, kind, value))
        if cached is not None:
            return cached
        key = self._tenant_keys.get(tenant)
        if key is None:
            key = self._tenant_keys[tenant] = self.store.pseudonym_key(tenant)
        message = f"{kind}\0{value}".encode("utf-8", "surrogatepass")
        made = f"{kind}-{hmac.new(key, message, hashlib.sha256).hexdigest()[:DIGEST_HEX]}"
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[(tenant, kind, value)] = made
        return made


def _is_pseudonym(value: str, kind: str) -> bool:
    return len(value) == DIGEST_HEX + 2 and value.startswith(f"{kind}-") and \
        all(c in "0123456789abcdef" for c in value[2:])
