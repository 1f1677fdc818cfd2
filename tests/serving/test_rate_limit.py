"""Token buckets per key: a burst, then the steady rate, and how long to wait."""

from serving.auth import OPEN
from serving.rate_limit import RateLimiter


def test_burst_then_rate_then_refill():
    now = [100.0]
    limiter = RateLimiter(rate_per_s=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.retry_after("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.retry_after("k") == 0.5  # one token needs half a second at 2/s
    assert limiter.retry_after("other") == 0.0  # buckets are per key
    now[0] += 0.5
    assert limiter.retry_after("k") == 0.0 and limiter.retry_after("k") > 0
    now[0] += 60
    assert [limiter.retry_after("k") for _ in range(4)][-1] > 0  # refills up to the burst, no further


def test_open_serving_is_not_limited():
    limiter = RateLimiter(rate_per_s=1.0, burst=1)
    assert all(limiter.retry_after(OPEN) == 0.0 for _ in range(100))
