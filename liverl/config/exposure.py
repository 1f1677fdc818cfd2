"""The defaults that are fine on one machine and a hole anywhere else: a service bound beyond loopback refuses
to start with the shipped capture token (anyone could then write as the demo tenant). Pseudonyms have no
shipped secret: each tenant's key is made at random in the key store (liverl.privacy.pseudonyms)."""

from __future__ import annotations

import ipaddress

from liverl.config.ingest import IngestConfig
from liverl.config.redaction import RedactionConfig

SHIPPED_TOKENS = frozenset(IngestConfig().tenant_tokens.values())


def is_loopback(host: str) -> bool:
    """True only for addresses this machine alone can reach (a host name may resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_shipped_secrets(host: str, what: str, redaction: RedactionConfig | None = None,
                           tenant_tokens: dict[str, str] | None = None) -> None:
    """Raise, saying what to set, when `what` (a setting like "ingest.host") binds beyond loopback with a
    shipped default secret. redaction: no longer checked (it holds no secret since the pseudonym salt went);
    kept so that callers passing it positionally still work."""
    if is_loopback(host):
        return
    shipped = sorted(t for t, token in (tenant_tokens or {}).items() if token in SHIPPED_TOKENS)
    if shipped:
        raise ValueError(f"{what} is {host!r}, beyond this machine, but tenants {shipped} use the shipped capture "
                         f"token. Set LIVERL_INGEST__TENANT_TOKENS, or bind {what} to 127.0.0.1.")
