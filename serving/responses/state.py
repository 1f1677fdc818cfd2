"""What POST /v1/responses keeps so that a later request can continue a response by its previous_response_id:
per tenant, bounded, expiring, in this process's memory.

A stored response is the conversation up to and including its output as chat messages (what the next
request's prompt is rendered from), the session it was recorded in (the continuation is recorded in the
same one, so the trainer sees one trajectory) and the function call ids the conversation holds (a
function_call_output must answer one of them). Entries are keyed by (tenant, response id): a response is
only ever found by its own tenant, and another tenant's id reads exactly as an unknown one, so an answer
never tells a caller that it exists.

Bounds (serving.responses_*): at most max_per_tenant entries per tenant, so one tenant's traffic never
evicts another's conversations, and max_stored over all tenants (open serving takes any tenant header);
the least recently used goes first. An entry expires ttl_s after it was stored. The message dicts are
shared between a conversation's responses (each keeps a tuple of references), so a conversation's text is
held once, plus a reference per message per stored response.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


class ResponseStore:
    def __init__(self, max_stored: int, max_per_tenant: int, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.max_stored = max_stored
        self.max_per_tenant = max_per_tenant
        self.ttl_s = ttl_s
        self._clock = clock
        self._all: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()  # least recently used first
        self._by_tenant: dict[str, OrderedDict[str, None]] = {}  # the same entries, per tenant, same order

    @classmethod
    def from_config(cls, config: ServingConfig) -> ResponseStore:
        return cls(config.responses_max_stored, config.responses_max_per_tenant, config.responses_ttl_s)

    def __len__(self) -> int:
        return len(self._all)

    def tenant_size(self, tenant: str) -> int:
        return len(self._by_tenant.get(tenant, ()))

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's response of that id, or None (unknown, expired, evicted or another tenant's)."""
        key = (tenant, response_id)
        stored = self._all.get(key)
        if stored is None:
            return None
        if self._clock() - stored.stored_at > self.ttl_s:
            self._drop(key)
            return None
        self._all.move_to_end(key)
        self._by_tenant[tenant].move_to_end(response_id)
        return stored

    def new(self, session_id: str, messages: tuple[dict[str, Any], ...], call_ids: frozenset[str],
            key_version: object = None) -> StoredResponse:
        return StoredResponse(session_id, messages, call_ids, self._clock(), key_version)

    def drop(self, tenant: str, response_id: str) -> None:
        """Forget a kept response now (its session was erased)."""
        if (tenant, response_id) in self._all:
            self._drop((tenant, response_id))

    def put(self, tenant: str, response_id: str, response: StoredResponse) -> None:
        """Keep a response, evicting the least recently used past either bound."""
        if self.max_stored == 0 or self.max_per_tenant == 0:
            return
        key = (tenant, response_id)
        self._all[key] = response
        self._all.move_to_end(key)
        own = self._by_tenant.setdefault(tenant, OrderedDict())
        own[response_id] = None
        own.move_to_end(response_id)
        while len(own) > self.max_per_tenant:
            self._drop((tenant, next(iter(own))))
        while len(self._all) > self.max_stored:
            self._drop(next(iter(self._all)))

    def _drop(self, key: tuple[str, str]) -> None:
        tenant, response_id = key
        del self._all[key]
        own = self._by_tenant[tenant]
        del own[response_id]
        if not own:
            del self._by_tenant[tenant]
