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


class _Engine:
    """Counts generations; yields one delta naming the weights it has when the generation runs."""

    policy_dir = Path(".")

    def __init__(self):
        self.weights = "1"

    async def generate(self, prompt_token_ids, sampling, request_id, final_only=False):
        from serving.engines.engine import Delta

        yield Delta([int(self.weights)], [0.0], "stop")


def test_a_hold_labels_new_requests_with_the_new_version_and_runs_them_after_release():
    async def main():
        engine = _Engine()
        router = Router()
        router.switch(Slot("1", engine, None, Path("."), ""))
        hold = router.hold(Slot("2", engine, None, Path("."), ""))
        held = router.acquire()
        assert held.version == "2"
        waiting = asyncio.create_task(anext(held.engine.generate([1], None, "r")))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # held until the weights are in
        engine.weights = "2"
        assert hold.release() >= 0.05
        assert (await waiting).token_ids == [2]  # ran on the weights it is labelled with
        assert router.acquire().engine is engine

    asyncio.run(main())


def test_a_failed_hold_fails_held_requests_and_serves_the_previous_version():
    async def main():
        engine = _Engine()
        router = Router()
        router.switch(Slot("1", engine, None, Path("."), ""))
        hold = router.hold(Slot("2", engine, None, Path("."), ""))
        held = router.acquire()
        hold.fail(RuntimeError("version 2 could not be loaded"))
        try:
            await anext(held.engine.generate([1], None, "r"))
            raise AssertionError("a held request of a failed version must not run")
        except RuntimeError as error:
            assert "could not be loaded" in str(error)
        assert router.acquire().version == "1"

    asyncio.run(main())


def test_a_hold_needs_the_serving_engine():
    async def main():
        router = Router()
        router.switch(Slot("1", _Engine(), None, Path("."), ""))
        try:
            router.hold(Slot("2", _Engine(), None, Path("."), ""))
            raise AssertionError("a hold on another engine must be refused")
        except ValueError:
            assert router.champion.version == "1"

    asyncio.run(main())
