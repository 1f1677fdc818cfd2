"""Leases: a replaced version drains before it is freed; the canary takes its share."""

import asyncio
import random
from pathlib import Path

from serving.router import Router, Slot


def _slot(version):
    return Slot(version, engine=None, tokenizer=None, policy_dir=Path("."), source_uri="")


def test_requests_keep_their_version_across_a_switch_and_the_old_one_drains():
    async def main():
        router = Router()
        router.switch(_slot("1"))
        held = router.acquire()
        old = router.switch(_slot("2"))
        assert old is held and router.acquire().version == "2"
        assert not await old.drained(0.05)
        held.release(True, 0.1)
        assert await old.drained(0.05)

    asyncio.run(main())


def test_canary_fraction_routes_a_share():
    router = Router(canary_fraction=0.25, rng=random.Random(0))
    router.switch(_slot("1"))
    router.canary = _slot("2")
    picks = [router.acquire().version for _ in range(2000)]
    assert 0.2 < picks.count("2") / len(picks) < 0.3


def test_p99_and_error_counts():
    slot = _slot("1")
    for i in range(100):
        slot.acquire()
        slot.release(i % 10 != 0, i / 100)
    assert slot.served == 100 and slot.failed == 10
    assert slot.p99_latency_s() == 0.99
