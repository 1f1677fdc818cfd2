"""What `liverl forget` erased leaves serving's memory within a sweep, not at its ttl
(serving/recording/erasure_sweep.py), on the real file key store."""

import asyncio
from dataclasses import dataclass

from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from serving.recording.erasure_sweep import ErasureSweep
from serving.recording.subjects import ServingSubjects
from serving.recording.tenant_lru import TenantLru


@dataclass(frozen=True)
class Entry:
    session_id: str
    key_version: object
    stored_at: float = 0.0
    text: str = ""


def _kept(subjects, entries):
    """Two maps (as responses and stitched calls are), each entry stored under its tenant's current key version."""
    maps = [TenantLru(10_000, 10_000, 3600.0, clock=lambda: 0.0) for _ in range(2)]
    for index, (tenant, session) in enumerate(entries):
        maps[index % 2].put(tenant, f"k{index}", Entry(session, subjects.key_version(tenant), text=f"{session} text"))
    return maps


def _sessions(maps):
    return sorted((tenant, lru.peek(tenant, key).session_id) for lru in maps for tenant in lru.tenants()
                  for key in lru.keys(tenant))


def _sweep(subjects, maps):
    return ErasureSweep(maps, subjects.erasure_state, subjects.erased_since, interval_s=0.01)


def test_a_forgotten_sessions_entries_leave_memory_and_nothing_else_does(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    subjects = ServingSubjects(store, Pseudonyms(store))
    maps = _kept(subjects, [("acme", "s-forget"), ("acme", "s-forget"), ("acme", "s-stay"), ("zeta", "s-forget")])
    sweep = _sweep(subjects, maps)
    assert asyncio.run(sweep.sweep()) == 0  # nothing erased: every tenant checked once, nothing dropped
    store.forget("acme", [subjects.pseudonyms.session("acme", "s-forget")])
    assert [(tenant, seen) for tenant, _, seen in asyncio.run(sweep.changed_tenants())] == [("acme", True)]
    assert asyncio.run(sweep.sweep()) == 2
    assert _sessions(maps) == [("acme", "s-stay"), ("zeta", "s-forget")]  # another tenant's same id is another's
    assert asyncio.run(sweep.changed_tenants()) == []  # swept: the next interval checks no entry


def test_a_tenants_erasure_empties_its_memory(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    subjects = ServingSubjects(store, Pseudonyms(store, recheck_s=0.0))
    maps = _kept(subjects, [("acme", f"s{i}") for i in range(2500)] + [("zeta", "s1")])  # more than one batch
    sweep = _sweep(subjects, maps)
    asyncio.run(sweep.sweep())
    store.forget_tenant("acme")
    assert asyncio.run(sweep.sweep()) == 2500
    assert _sessions(maps) == [("zeta", "s1")]


def test_the_sweep_runs_on_its_own_until_cancelled(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    subjects = ServingSubjects(store, Pseudonyms(store))
    maps = _kept(subjects, [("acme", "s-forget"), ("acme", "s-stay")])
    sweep = _sweep(subjects, maps)

    async def erase_then_wait():
        task = asyncio.create_task(sweep.run())
        await asyncio.sleep(0.05)
        store.forget("acme", [subjects.pseudonyms.session("acme", "s-forget")])
        for _ in range(500):  # a sweep every 10 ms: stop on the count, the loop's bound only a ceiling
            if sweep.dropped:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(erase_then_wait())
    assert sweep.dropped == 1 and _sessions(maps) == [("acme", "s-stay")]


def test_an_entry_two_sessions_left_goes_on_any_erasure_in_its_tenant(tmp_path):
    """A stitching entry two sessions left names neither (AMBIGUOUS): it may hold an erased session's request."""
    from serving.recording.stitching import AMBIGUOUS

    store = FileKeyStore(tmp_path / "keys")
    subjects = ServingSubjects(store, Pseudonyms(store))
    maps = _kept(subjects, [("acme", AMBIGUOUS), ("acme", "s-stay"), ("zeta", AMBIGUOUS)])
    sweep = _sweep(subjects, maps)
    asyncio.run(sweep.sweep())
    assert len(_sessions(maps)) == 3  # no erasure: kept
    store.forget("acme", [subjects.pseudonyms.session("acme", "s-forget")])
    asyncio.run(sweep.sweep())
    assert _sessions(maps) == [("acme", "s-stay"), ("zeta", AMBIGUOUS)]


def test_a_tenant_whose_keys_cannot_be_read_does_not_stop_the_others(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    subjects = ServingSubjects(store, Pseudonyms(store))
    maps = _kept(subjects, [("acme", "s1"), ("zeta", "s1")])

    def state(tenant):
        if tenant == "acme":
            raise OSError("permission denied")
        return subjects.erasure_state(tenant)

    sweep = ErasureSweep(maps, state, subjects.erased_since, interval_s=0.01)
    asyncio.run(sweep.sweep())
    store.forget_tenant("zeta")
    assert asyncio.run(sweep.sweep()) == 1
    assert _sessions(maps) == [("acme", "s1")]  # swept when it can be read
