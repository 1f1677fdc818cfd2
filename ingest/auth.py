"""Per-tenant bearer tokens: the token decides the tenant, so no caller can write under another's id."""

from __future__ import annotations

from collections.abc import Mapping

from liverl.access.bearer import SecretTable, bearer_secret


class AuthError(Exception):
    """`status` is "unauthenticated" (missing or wrong token) or "permission_denied" (wrong tenant)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class TokenAuth:
    def __init__(self, tenant_tokens: Mapping[str, str]):
        empty = [tenant for tenant, token in tenant_tokens.items() if not token]
        if empty:
            raise ValueError(f"tenants {empty} have an empty token in ingest.tenant_tokens; give each a secret")
        slashed = [tenant for tenant in tenant_tokens if not tenant or "/" in tenant]
        if slashed:
            raise ValueError(f"tenant ids {slashed} are empty or hold '/', which separates tenant and session in "
                             "Kafka keys; rename them in ingest.tenant_tokens")
        if len(set(tenant_tokens.values())) < len(tenant_tokens):
            raise ValueError("two tenants share a token in ingest.tenant_tokens; a token must name one tenant")
        self._tenants = SecretTable((token, tenant) for tenant, token in tenant_tokens.items())

    def tenant_of(self, authorization: str | None, claimed_tenant: str | None = None) -> str:
        """The tenant whose token is in `authorization` ("Bearer <token>"); raises AuthError otherwise."""
        if not authorization:
            raise AuthError("unauthenticated", "missing credentials: send 'authorization: Bearer <tenant token>'")
        token = bearer_secret(authorization)
        if token is None:
            raise AuthError("unauthenticated", "malformed authorization: expected 'Bearer <tenant token>'")
        tenant = self._tenants.owner_of(token)
        if tenant is None:
            raise AuthError("unauthenticated", "invalid token: it belongs to no tenant in ingest.tenant_tokens")
        if claimed_tenant and claimed_tenant != tenant:
            raise AuthError("permission_denied", f"the token is not valid for tenant {claimed_tenant!r}")
        return tenant
