"""One token bucket for both edges: a burst, then the rate, a refusal that spends nothing, and costs
above the burst charged as the burst."""

import threading

import pytest

from liverl.access.token_bucket import TokenBuckets


def test_burst_then_rate_then_refill_up_to_the_burst_only():
    now = [100.0]
    buckets = TokenBuckets(rate_per_s=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == pytest.approx(0.5)  # one token at 2/s
    assert buckets.take("other") == 0.0  # a bucket per key
    now[0] += 60
    assert [buckets.take("k") for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.5)]


def test_a_refused_take_spends_nothing_and_says_how_long_to_wait():
    now = [0.0]
    buckets = TokenBuckets(rate_per_s=10.0, burst=20, clock=lambda: now[0])
    assert buckets.take("acme", 20) == 0.0
    assert buckets.take("acme", 5) == pytest.approx(0.5)
    now[0] = 0.5
    assert buckets.take("acme", 5) == 0.0  # the refusal took none of the five tokens that came since


def test_a_cost_above_the_burst_waits_for_a_full_bucket_never_forever():
    now = [0.0]
    buckets = TokenBuckets(rate_per_s=1.0, burst=4, clock=lambda: now[0])
    assert buckets.take("acme", 10**6) == 0.0
    assert buckets.take("acme", 10**6) == pytest.approx(4.0)


def test_a_rate_of_zero_disables_the_limit():
    buckets = TokenBuckets(rate_per_s=0.0, burst=1)
    assert all(buckets.take("acme", 10**9) == 0.0 for _ in range(100))


def test_threads_taking_at_once_never_overspend():
    buckets = TokenBuckets(rate_per_s=1e-9, burst=100, clock=lambda: 0.0)  # no refill during the test
    granted: list[int] = []

    def spend():
        granted.extend(1 for _ in range(50) if buckets.take("acme") == 0.0)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(granted) == 100
