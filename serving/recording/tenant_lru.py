"""A per-tenant, bounded, expiring map in this process's memory: what serving keeps about recent calls
(serving.http.responses.state's responses, serving.recording.stitching's conversations).

Entries are keyed by (tenant, key): an entry is only ever found by its own tenant, and another tenant's key
reads exactly as an unknown one. Bounds: at most max_per_tenant entries per tenant, so one tenant's traffic
never evicts another's, and max_entries over all tenants (open serving takes any tenant header); the least
recently used goes first. An entry expires ttl_s after it was stored (`stored_at`, on the map's clock).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Stored(Protocol):
    stored_at: float  # the map's clock when it was stored


V = TypeVar("V", bound=Stored)


class TenantLru(Generic[V]):
    def __init__(self, max_entries: int, max_per_tenant: int, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.max_entries = max_entries
        self.max_per_tenant = max_per_tenant
        self.ttl_s = ttl_s
        self.clock = clock
        self._all: OrderedDict[tuple[str, Hashable], V] = OrderedDict()  # least recently used first
        self._by_tenant: dict[str, OrderedDict[Hashable, None]] = {}  # the same entries, per tenant, same order

    def __len__(self) -> int:
        return len(self._all)

    def tenant_size(self, tenant: str) -> int:
        return len(self._by_tenant.get(tenant, ()))

    def get(self, tenant: str, key: Hashable) -> V | None:
        """The tenant's entry of that key, or None (unknown, expired, evicted or another tenant's)."""
        entry = self._all.get((tenant, key))
        if entry is None:
            return None
        if self.clock() - entry.stored_at > self.ttl_s:
            self._drop((tenant, key))
            return None
        self._all.move_to_end((tenant, key))
        self._by_tenant[tenant].move_to_end(key)
        return entry

    def peek(self, tenant: str, key: Hashable) -> V | None:
        """The entry as stored, expired or not, without marking it used."""
        return self._all.get((tenant, key))

    def tenants(self) -> list[str]:
        """The tenants holding entries now."""
        return list(self._by_tenant)

    def keys(self, tenant: str) -> list[Hashable]:
        """The tenant's keys now, least recently used first (a copy: entries may be dropped while it is read)."""
        return list(self._by_tenant.get(tenant, ()))

    def drop(self, tenant: str, key: Hashable) -> None:
        """Forget an entry now."""
        if (tenant, key) in self._all:
            self._drop((tenant, key))

    def put(self, tenant: str, key: Hashable, entry: V) -> None:
        """Keep an entry, evicting the least recently used past either bound."""
        if self.max_entries == 0 or self.max_per_tenant == 0:
            return
        self._all[(tenant, key)] = entry
        self._all.move_to_end((tenant, key))
        own = self._by_tenant.setdefault(tenant, OrderedDict())
        own[key] = None
        own.move_to_end(key)
        while len(own) > self.max_per_tenant:
            self._drop((tenant, next(iter(own))))
        while len(self._all) > self.max_entries:
            self._drop(next(iter(self._all)))

    def _drop(self, full_key: tuple[str, Hashable]) -> None:
        tenant, key = full_key
        del self._all[full_key]
        own = self._by_tenant[tenant]
        del own[key]
        if not own:
            del self._by_tenant[tenant]
