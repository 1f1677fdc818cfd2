"""API keys and tenancy: one check for both APIs. Keys travel as "authorization: Bearer KEY".

A key is bound to one tenant (serving.api_keys); the tenant a call is recorded as comes from the key,
never from a header. Headers may only narrow what the key allows: x-liverl-tenant must repeat the
key's tenant and x-liverl-agent-role must be one of its roles. With no key configured at all, serving
is open (local use): the headers decide, and the server refuses to start open on a non-loopback host.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from liverl.access.bearer import SecretTable, bearer_secret
from liverl.config.exposure import is_loopback
from liverl.config.serving import ApiKeyGrant

OPEN = "open"  # key id of every call while serving runs without keys


class Forbidden(Exception):
    """An authenticated caller asked for something its key does not allow (HTTP 403, PERMISSION_DENIED)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason  # "cross-tenant" | "forbidden-role"


@dataclass(frozen=True)
class Principal:
    """Who a request acts as, fixed by its API key."""

    key_id: str  # a non-secret label of the key (rate limits, logs): "key-<sha256 prefix>", or OPEN
    tenant: str | None  # None only when serving is open: the header (or the default tenant) decides
    roles: frozenset[str] = frozenset()  # agent roles the key may claim; empty: any
    admin: bool = False

    def tenant_for(self, claimed: str | None, default_tenant: str) -> str:
        """The tenant to record: the key's. A header naming another tenant raises Forbidden."""
        claimed = (claimed or "").strip()
        if self.tenant is None:
            return claimed or default_tenant
        if claimed and claimed != self.tenant:
            raise Forbidden("cross-tenant", "this API key belongs to another tenant than x-liverl-tenant names: "
                            "drop the header or use that tenant's key")
        return self.tenant

    def check_role(self, role: str) -> str:
        """The agent role to record (its name, "" for unspecified), if the key may claim it."""
        if not self.roles:
            return role
        if not role and len(self.roles) == 1:
            return next(iter(self.roles))
        if role not in self.roles:
            allowed = ", ".join(sorted(self.roles))
            raise Forbidden("forbidden-role", f"this API key may act only as agent role {allowed}: "
                            "send one of them in x-liverl-agent-role")
        return role


class Keys:
    def __init__(self, grants: Mapping[str, ApiKeyGrant], admin_keys: list[str], default_tenant: str):
        if any(not key for key in grants) or any(not key for key in admin_keys):
            raise ValueError("serving.api_keys and serving.admin_api_keys must not hold an empty key")
        tenant_entries = [(key, _principal(key, grant.tenant, grant.roles)) for key, grant in grants.items()]
        admin_entries = [(key, _principal(key, default_tenant, (), admin=True)) for key in admin_keys]
        self._any = SecretTable(tenant_entries + admin_entries)
        self._admins = SecretTable(admin_entries)
        self._open = Principal(OPEN, None, admin=True)

    @property
    def open(self) -> bool:
        return not len(self._any)

    def principal(self, authorization: str | None) -> Principal | None:
        """Who may generate, list models, read info: a tenant's key or an admin key; None: refuse (401)."""
        if self.open:
            return self._open
        return self._any.owner_of(bearer_secret(authorization))

    def admin(self, authorization: str | None) -> Principal | None:
        """Who may force a swap or roll back: an admin key only (anyone while open); None: refuse."""
        if self.open:
            return self._open
        return self._admins.owner_of(bearer_secret(authorization))


def refuse_open_exposure(host: str, keys: Keys, allow_open: bool) -> None:
    """Raise when serving would listen beyond this machine with no API keys, unless told to run open."""
    if keys.open and not allow_open and not is_loopback(host):
        raise ValueError(f"serving.host is {host!r} but no API keys are configured: anyone who reaches it could "
                         "generate as any tenant and swap versions. Set serving.api_keys and serving.admin_api_keys "
                         "(LIVERL_SERVING__API_KEYS, LIVERL_SERVING__ADMIN_API_KEYS), bind serving.host to "
                         "127.0.0.1, or set serving.allow_open = true to serve open on purpose.")


def _principal(key: str, tenant: str, roles, admin: bool = False) -> Principal:
    return Principal(f"key-{hashlib.sha256(key.encode()).hexdigest()[:12]}", tenant, frozenset(roles), admin)
