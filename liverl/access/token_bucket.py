"""Token buckets keyed by caller: each key may spend `rate_per_s` tokens a second on average and
`burst` at once after being idle. A refused request spends nothing and is told how long to wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBuckets:
    """One bucket per key, created full on first use; rate_per_s <= 0 disables the limit."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate_per_s = rate_per_s
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, time of the last refill)
        # ingest takes from gRPC worker threads; serving from one event loop, where the lock is uncontended.
        self._lock = threading.Lock()

    def take(self, key: str, cost: int = 1) -> float:
        """Spend `cost` tokens of `key`'s bucket: 0.0 when granted, else the seconds until they are there.

        A cost above the burst is charged as the burst (it waits for a full bucket, never forever)."""
        if self.rate_per_s <= 0:
            return 0.0
        cost = min(max(1, cost), self.burst)
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate_per_s)
            if tokens < cost:
                self._buckets[key] = (tokens, now)
                return (cost - tokens) / self.rate_per_s
            self._buckets[key] = (tokens - cost, now)
            return 0.0
