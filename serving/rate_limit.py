"""Per-key token buckets (liverl.access): each API key may make rate_per_s requests on average, burst at once."""

from __future__ import annotations

import time

from liverl.access.token_bucket import TokenBuckets
from serving.auth import OPEN


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, clock=time.monotonic):
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets = TokenBuckets(rate_per_s, burst, clock)  # one per configured key: bounded by the config

    def retry_after(self, key_id: str) -> float:
        """0.0 when the key may make a request now (one token is taken), else seconds to wait.
        Open serving has no keys to tell callers apart and is not limited."""
        if key_id == OPEN:
            return 0.0
        return self._buckets.take(key_id)
