"""The shared backoff: doubling delays up to a cap, jittered around each, back to the first after reset()."""

import random

from liverl.io.backoff import Backoff


def test_delays_double_up_to_the_cap_and_reset():
    backoff = Backoff(first_s=0.1, cap_s=0.5, jitter=False)
    assert [backoff.next_delay() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.next_delay() == 0.1


def test_jitter_stays_within_half_to_one_and_a_half_of_each_delay():
    random.seed(7)
    backoff = Backoff(first_s=1.0, cap_s=4.0)
    for expected in (1.0, 2.0, 4.0, 4.0):
        assert 0.5 * expected <= backoff.next_delay() < 1.5 * expected


def test_a_long_outage_does_not_overflow():
    backoff = Backoff(first_s=0.1, cap_s=5.0, jitter=False)
    for _ in range(10_000):
        delay = backoff.next_delay()
    assert delay == 5.0
