"""The defaults that are fine on one machine and a hole anywhere else: a service bound beyond loopback refuses
to start with the shipped capture token or pseudonym salt (anyone could then write as the demo tenant, or
recompute every pseudonym)."""

from __future__ import annotations

import ipaddress

from liverl.config.ingest import IngestConfig
from liverl.config.redaction import RedactionConfig

SHIPPED_TOKENS = frozenset(IngestConfig().tenant_tokens.values())
SHIPPED_SALT = RedactionConfig().pseudonym_salt


def is_loopback(host: str) -> bool:
    """True only for addresses this machine alone can reach (a host name may resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_shipped_secrets(host: str, what: str, redaction: RedactionConfig,
                           tenant_tokens: dict[str, str] | None = None) -> None:
    """Raise, saying what to set, when `what` (a setting like "ingest.host") binds beyond loopback with a
    shipped default secret."""
    if is_loopback(host):
        return
    problems = []
    shipped = sorted(t for t, token in (tenant_tokens or {}).items() if token in SHIPPED_TOKENS)
    if shipped:
        problems.append(f"tenants {shipped} use the shipped capture token (set LIVERL_INGEST__TENANT_TOKENS)")
    if redaction.pseudonym_salt == SHIPPED_SALT:
        problems.append("the pseudonym salt is the shipped one (set LIVERL_INGEST__REDACTION__PSEUDONYM_SALT to a "
                        "secret of at least 16 random characters)")
    if problems:
        raise ValueError(f"{what} is {host!r}, beyond this machine, but " + "; and ".join(problems)
                         + f". Set them, or bind {what} to 127.0.0.1.")
