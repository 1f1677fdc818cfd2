"""Per-key token buckets: each API key may make rate_per_s requests on average, burst at once.

Both APIs run on the server's event loop (one thread), so the buckets need no lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from serving.auth import OPEN


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: int
    tokens: float
    updated: float  # time.monotonic() of the last refill

    def take(self, now: float) -> float:
        """Take one token; 0.0 when granted, else the seconds until one is available."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, clock=time.monotonic):
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}  # one per configured key: bounded by the config

    def retry_after(self, key_id: str) -> float:
        """0.0 when the key may make a request now (one token is taken), else seconds to wait.
        Open serving has no keys to tell callers apart and is not limited."""
        if key_id == OPEN:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = TokenBucket(self.rate_per_s, self.burst, float(self.burst), now)
        return bucket.take(now)
