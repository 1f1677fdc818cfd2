"""What POST /v1/responses keeps so that a later request can continue a response by its previous_response_id:
per tenant, bounded, expiring, in this process's memory.

A stored response is the conversation up to and including its output as chat messages (what the next
request's prompt is rendered from), the session it was recorded in (the continuation is recorded in the
same one, so the trainer sees one trajectory) and the function call ids the conversation holds (a
function_call_output must answer one of them). Entries are keyed by (tenant, response id): a response is
only ever found by its own tenant, and another tenant's id reads exactly as an unknown one, so an answer
never tells a caller that it exists.

Bounds (serving.responses_*, kept by serving.recording.tenant_lru): at most max_per_tenant entries per tenant, so one
tenant's traffic never evicts another's conversations, and max_stored over all tenants (open serving takes any
tenant header); the least recently used goes first. An entry expires ttl_s after it was stored. The message dicts are
shared between a conversation's responses (each keeps a tuple of references), so a conversation's text is
held once, plus a reference per message per stored response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serving.recording.tenant_lru import TenantLru

if TYPE_CHECKING:
    from liverl.config.serving import ServingConfig


@dataclass(frozen=True)
class StoredResponse:
    """One response as a later request continues it."""

    session_id: str
    messages: tuple[dict[str, Any], ...]  # chat messages: its input (instructions excepted) and its output
    call_ids: frozenset[str]  # function call ids of the conversation: what a function_call_output may answer
    stored_at: float  # the store's clock
    key_version: object = None  # the tenant's pseudonym key when kept: a tenant's erasure replaces it


class ResponseStore(TenantLru[StoredResponse]):
    """Responses by (tenant, response id): serving.recording.tenant_lru's bounds and expiry."""

    @classmethod
    def from_config(cls, config: ServingConfig) -> ResponseStore:
        return cls(config.responses_max_stored, config.responses_max_per_tenant, config.responses_ttl_s)

    def new(self, session_id: str, messages: tuple[dict[str, Any], ...], call_ids: frozenset[str],
            key_version: object = None) -> StoredResponse:
        return StoredResponse(session_id, messages, call_ids, self.clock(), key_version)
