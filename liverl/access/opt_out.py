"""Who must never be recorded: ingest.opt_out_tenants and ingest.opt_out_users, applied by every entry.

Capture (SDK and HTTP events), the OTLP endpoint, `liverl import` and serving's ModelCall recorder all ask
the same question here, before anything of the subject is built or stored; each counts what it dropped.
Compared with the ids as the caller sent them (before redaction turns them into pseudonyms).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


class OptOut:
    def __init__(self, tenants: Iterable[str] = (), users: Mapping[str, Iterable[str]] | None = None):
        self.tenants = frozenset(tenants)
        self.users = {tenant: frozenset(ids) for tenant, ids in (users or {}).items() if ids}

    @classmethod
    def of(cls, ingest) -> "OptOut":
        """From an IngestConfig (liverl.config.ingest)."""
        return cls(ingest.opt_out_tenants, ingest.opt_out_users)

    def with_pseudonyms(self, pseudonym: Callable[[str], str]) -> "OptOut":
        """Also matching each user's pseudonym (an id redacted where it held personal data, as the SDK's spool
        writes user ids): an opted-out user stays recognised after redaction."""
        return OptOut(self.tenants, {tenant: {*users, *map(pseudonym, users)} for tenant, users in self.users.items()})

    def tenant(self, tenant: str) -> bool:
        """The whole tenant opted out."""
        return tenant in self.tenants

    def user(self, tenant: str, user: str) -> bool:
        """That user of that tenant opted out ("" names no user: never opted out on its own)."""
        return bool(user) and user in self.users.get(tenant, ())

    def excludes(self, tenant: str, user: str = "") -> bool:
        """Nothing of this tenant, or of this user of it, may be recorded."""
        return self.tenant(tenant) or self.user(tenant, user)

    def __bool__(self) -> bool:
        return bool(self.tenants or self.users)
