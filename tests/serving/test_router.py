"""Leases: a replaced version drains before it is freed; the canary takes its share."""

import asyncio
import random
from pathlib import Path

from serving.router import Router, Slot, process_session_key


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


def test_the_canary_takes_whole_sessions_and_its_share_of_them():
    # Seeded: the sessions' names are keyed by a fixed key of the test's own, so these counts are the same on every
    # run (no flake).
    router = Router(canary_fraction=0.2, rng=random.Random(0), session_key=process_session_key(b"test key"))
    router.switch(_slot("1"))
    router.canary = _slot("2")
    sessions = [f"s{i}" for i in range(4000)]
    first = {s: router.acquire("acme", s).version for s in sessions}
    assert all(router.acquire("acme", s).version == first[s] for s in sessions for _ in range(3))  # every call
    share = sum(v == "2" for v in first.values()) / len(sessions)
    # A binomial(4000, 0.2) share lies within 5 standard deviations (0.032) of 0.2 but for 6e-7 of keys.
    assert abs(share - 0.2) < 5 * (0.2 * 0.8 / len(sessions)) ** 0.5
    # Another tenant's session of the same id is placed on its own; a call without a session is placed alone.
    assert {router.acquire("other", s).version for s in sessions[:200]} == {"1", "2"}
    assert {router.acquire("acme").version for _ in range(200)} == {"1", "2"}


def test_a_tenant_canary_takes_whole_sessions_of_its_tenant():
    from serving.engines.engine import Adapter

    router = Router(canary_fraction=0.5)
    router.switch(_slot("1"))  # its engine is None: the adapter below applies to it
    router.tenant_canaries["acme"] = Slot("3", engine=None, tokenizer=None, policy_dir=Path("."), source_uri="",
                                          adapter=Adapter("liverl-v3-1", 1, Path("."), "3", "1"))
    picks = {s: {router.acquire("acme", s).version for _ in range(5)} for s in (f"s{i}" for i in range(200))}
    assert all(len(versions) == 1 for versions in picks.values())
    assert {v for versions in picks.values() for v in versions} == {"1", "3"}
    assert {router.acquire("beta", "s1").version for _ in range(20)} == {"1"}  # no canary of its own
