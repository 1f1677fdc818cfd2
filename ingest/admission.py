"""What bounds one tenant's use of the capture service: a token bucket per tenant (events per second
with a burst) and a window of recently stored event ids per tenant (a resent event is acknowledged
again, not stored twice).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable


class RateLimited(Exception):
    """The tenant's bucket is empty: retry after `retry_after_s`."""

    def __init__(self, tenant: str, retry_after_s: float):
        super().__init__(f"tenant {tenant!r} is over its rate limit (ingest.rate_limit_events_per_s); "
                         f"retry after {retry_after_s:.2f} s")
        self.retry_after_s = retry_after_s


class TenantRateLimiter:
    """Token buckets keyed by tenant; a request costs one token per event (at least one)."""

    def __init__(self, events_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.events_per_s = events_per_s
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, last refill)
        self._lock = threading.Lock()

    def take(self, tenant: str, events: int) -> None:
        """Spend `events` tokens or raise RateLimited (spending nothing). events_per_s <= 0: no limit."""
        if self.events_per_s <= 0:
            return
        cost = min(max(1, events), self.burst)  # a batch bigger than the burst waits for a full bucket
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.events_per_s)
            if tokens < cost:
                self._buckets[tenant] = (tokens, now)
                raise RateLimited(tenant, (cost - tokens) / self.events_per_s)
            self._buckets[tenant] = (tokens - cost, now)


class RecentEvents:
    """The last `capacity` stored (tenant, event id) pairs, oldest forgotten first."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._seen

    def add(self, keys: Iterable[tuple[str, str]]) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            for key in keys:
                self._seen[key] = None
                self._seen.move_to_end(key)
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
