"""What bounds one tenant's use of the capture service: a token bucket per tenant (events per second
with a burst) and a window of recently stored event ids per tenant (a resent event is acknowledged
again, not stored twice).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from liverl.access.token_bucket import TokenBuckets


class RateLimited(Exception):
    """The tenant's bucket is empty: retry after `retry_after_s`."""

    def __init__(self, tenant: str, retry_after_s: float):
        super().__init__(f"tenant {tenant!r} is over its rate limit (ingest.rate_limit_events_per_s); "
                         f"retry after {retry_after_s:.2f} s")
        self.retry_after_s = retry_after_s


class TenantRateLimiter:
    """Token buckets keyed by tenant (liverl.access); a request costs one token per event (at least one)."""

    def __init__(self, events_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self._buckets = TokenBuckets(events_per_s, burst, clock)

    def take(self, tenant: str, events: int) -> None:
        """Spend `events` tokens or raise RateLimited (spending nothing). events_per_s <= 0: no limit."""
        wait_s = self._buckets.take(tenant, events)
        if wait_s > 0:
            raise RateLimited(tenant, wait_s)


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
