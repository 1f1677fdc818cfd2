"""Keyed pseudonyms per tenant: the stand-ins for user and session ids, and for ids that held personal data.

HMAC-SHA256 under the tenant's pseudonym key from the key store: the same id of the same tenant always gets
the same pseudonym (so a user's rows can be found and `liverl forget` can name them), two tenants' equal ids
get unrelated ones, and nobody without the key can test a guess. `liverl forget --tenant T --all` destroys the
key, so every pseudonym of the tenant then names nobody.

A running process (capture, serving, the pipelines) caches the key and the pseudonyms it made, but checks
that the key it holds is still the store's (store.pseudonym_key_version: one stat) on a call at most RECHECK_S
after the last check: once any process forgot the tenant, the next call drops the tenant's cached pseudonyms
and reads the new key, so one id never gets two pseudonyms from two processes. A stat costs microseconds
(several times a cached pseudonym: docs/measurements.md) and capture asks for two or more pseudonyms per event:
a millisecond between checks, shorter than one capture request, makes the check all but free.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field

from liverl.privacy.keystore import SubjectKeyStore

DIGEST_HEX = 32  # 128 bits
RECHECK_S = 0.001  # a tenant's key is checked against the store at most this long after its last check


@dataclass
class _TenantKey:
    """A tenant's key as the store held it at `version`, and the pseudonyms made with it."""

    version: object
    key: bytes
    checked_until: float = 0.0  # time.monotonic() before which the key is not checked again
    made: dict[tuple[str, str], str] = field(default_factory=dict)  # (prefix, value) -> pseudonym


class Pseudonyms:
    """One per process, shared by its stages (thread-safe: the caches tolerate races)."""

    def __init__(self, store: SubjectKeyStore, cache_size: int = 65_536, recheck_s: float = RECHECK_S):
        """recheck_s: how long a key checked against the store is used unchecked (0: a check on every call)."""
        self.store = store
        self._cache_size = cache_size
        self._recheck_s = recheck_s
        self._tenants: dict[str, _TenantKey] = {}
        self._cached = 0  # pseudonyms held, all tenants together: cleared when full (cheaper than an LRU)

    def user(self, tenant: str, user_id: str) -> str:
        """"u-<hex>": the user's pseudonym; "" for no user. A value that is one already is kept."""
        if not user_id or _is_pseudonym(user_id, "u"):
            return user_id
        return self._make(tenant, "u", user_id)

    def session(self, tenant: str, session_id: str) -> str:
        """"s-<hex>": the subject id of the session (its key's name in the key store)."""
        return self._make(tenant, "s", session_id)

    def redacted_id(self, tenant: str, kind: str, value: str) -> str:
        """"redacted-<kind>-<hex>": what redaction stores instead of an id (a join key) that held a finding of
        `kind` (liverl.redaction.Redactor, built with liverl.privacy.tenant_redactor)."""
        return self._make(tenant, f"redacted-{kind}", value)

    def key_version(self, tenant: str) -> object:
        """The version of the tenant's key, made now if it has none: what data kept in memory is tagged with, so
        that a later forget_tenant (which replaces the key) shows as a change of version."""
        return self._current(tenant).version

    def _make(self, tenant: str, prefix: str, value: str) -> str:
        keyed = self._current(tenant)
        made = keyed.made.get((prefix, value))
        if made is not None:
            return made
        made = f"{prefix}-{keyed_digest(keyed.key, prefix, value)}"
        if self._cached >= self._cache_size:
            for held in list(self._tenants.values()):
                held.made.clear()
            self._cached = 0
        keyed.made[(prefix, value)] = made
        self._cached += 1
        return made

    def _current(self, tenant: str) -> _TenantKey:
        """The tenant's key, checked against the store unless it was within recheck_s (one stat for the file
        store: at most one per call)."""
        keyed = self._tenants.get(tenant)
        if keyed is None:
            return self._load(tenant)
        now = time.monotonic()
        if now < keyed.checked_until:
            return keyed
        if keyed.version != self.store.pseudonym_key_version(tenant):
            return self._load(tenant)
        keyed.checked_until = now + self._recheck_s
        return keyed

    def _load(self, tenant: str) -> _TenantKey:
        """Read (or make) the tenant's key; its pseudonyms made under an older key are dropped with it."""
        for _ in range(5):  # the version around the read: a key replaced meanwhile is read again
            before = self.store.pseudonym_key_version(tenant)
            key = self.store.pseudonym_key(tenant)
            after = self.store.pseudonym_key_version(tenant)
            if before is not None and before == after:
                break
        else:
            raise RuntimeError(f"the pseudonym key of tenant {tenant!r} changed on every read (or its key store "
                               "gives it no version): check that nothing is forgetting the tenant in a loop")
        checked_until = time.monotonic() + self._recheck_s
        old = self._tenants.get(tenant)
        if old is not None and old.key == key:
            old.version, old.checked_until = after, checked_until  # a new version of the same key: keep them
            return old
        keyed = self._tenants[tenant] = _TenantKey(after, key, checked_until=checked_until)
        return keyed


def keyed_digest(key: bytes, prefix: str, value: str) -> str:
    """The hex HMAC of one pseudonym: the prefix separates user, session and redacted-id pseudonyms."""
    message = f"{prefix}\0{value}".encode("utf-8", "surrogatepass")
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:DIGEST_HEX]


def _is_pseudonym(value: str, kind: str) -> bool:
    return len(value) == DIGEST_HEX + 2 and value.startswith(f"{kind}-") and \
        all(c in "0123456789abcdef" for c in value[2:])
