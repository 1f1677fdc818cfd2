"""What `liverl forget` erased, dropped from serving's memory too, not only made unreachable.

Serving keeps recent calls in memory per tenant: the conversations POST /v1/responses may continue
(serving.http.responses.state, with their text) and the conversations and tool calls header-less calls are stitched
to (serving.recording.stitching, with a quoted tool call's arguments). Every use of a kept entry checks the key
store, so an erased session's entry is never used again; without the sweep it would still sit in memory until its
ttl (an hour by default). The sweep drops it: every interval it asks, for each tenant holding entries, whether the
key store changed for it (its pseudonym key version, replaced by a tenant's erasure, and how many subjects it has
forgotten); only then are that tenant's entries checked one by one, a batch at a time between which the event loop
serves requests, and those of erased sessions dropped (on a tenant's erasure, all of them). A stitching entry two
sessions left (AMBIGUOUS) names neither, so it goes on any erasure in its tenant: it is never stitched to, so
dropping it loses only the mark that the conversation was ambiguous. What a call would keep after its session's erasure is not kept
(serving.http.completions.stitched_call, serving.http.responses.api): the sweep only has to reach what came before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from serving.recording.stitching import AMBIGUOUS
from serving.recording.tenant_lru import TenantLru

log = logging.getLogger("liverl.serving")

BATCH = 1000  # entries (or tenants) checked between two turns of the event loop
_UNSEEN = object()  # the state of a tenant the sweep has not seen yet


class Kept(Protocol):
    session_id: str  # as the call named it (serving.http.completions.erased_since keys it as its records are)
    key_version: object  # the tenant's pseudonym key version when it was kept


class ErasureSweep:
    def __init__(self, kept: Sequence[TenantLru], state: Callable[[str], object],
                 erased: Callable[[str, str, object], bool], interval_s: float):
        """kept: the maps to sweep; state(tenant): what changes when an erasure reaches the tenant;
        erased(tenant, session_id, key_version): whether a kept entry's session or tenant was erased since."""
        self.kept = kept
        self.state = state
        self.erased = erased
        self.interval_s = interval_s
        self._swept: dict[str, object] = {}  # each tenant's state when its entries were last checked
        self.dropped = 0

    async def changed_tenants(self) -> list[tuple[str, object, bool]]:
        """The tenants holding entries whose key store state is not the one last swept (a tenant first seen is),
        with that state and whether the sweep had seen the tenant (then an erasure reached it since); tenants that
        hold nothing any more are forgotten here too. Two stats a tenant, a batch of tenants between two turns of
        the event loop (open serving takes any tenant header)."""
        holding = list(dict.fromkeys(tenant for lru in self.kept for tenant in lru.tenants()))
        self._swept = {tenant: self._swept[tenant] for tenant in holding if tenant in self._swept}
        changed = []
        for start in range(0, len(holding), BATCH):
            for tenant in holding[start:start + BATCH]:
                try:
                    state = self.state(tenant)
                except Exception:  # this tenant's keys cannot be read now: the others are swept, it next time
                    log.exception("serving erasure-sweep cannot read tenant %r's key store state", tenant)
                    continue
                if self._swept.get(tenant, _UNSEEN) != state:
                    changed.append((tenant, state, tenant in self._swept))
            await asyncio.sleep(0)
        return changed

    async def sweep(self) -> int:
        """Drop the kept entries of every session (or tenant) erased since the last sweep; how many."""
        dropped = 0
        for tenant, state, erased_since_seen in await self.changed_tenants():
            for lru in self.kept:
                keys = lru.keys(tenant)
                for start in range(0, len(keys), BATCH):
                    for key in keys[start:start + BATCH]:
                        entry = lru.peek(tenant, key)
                        if entry is not None and self._goes(tenant, entry, erased_since_seen):
                            lru.drop(tenant, key)
                            dropped += 1
                    await asyncio.sleep(0)
            self._swept[tenant] = state  # read before its entries were: a change meanwhile is swept next time
        self.dropped += dropped
        return dropped

    def _goes(self, tenant: str, entry: Kept, erased_since_seen: bool) -> bool:
        """Whether an entry leaves memory: its session or tenant was erased, or it names no one session (AMBIGUOUS)
        and an erasure reached its tenant since the sweep last saw it."""
        if entry.session_id == AMBIGUOUS:
            return erased_since_seen
        return self.erased(tenant, entry.session_id, entry.key_version)

    async def run(self) -> None:
        """Sweep every interval_s until cancelled; a failed sweep is logged and the next one tries again."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                if dropped := await self.sweep():
                    log.info("serving erasure-sweep dropped=%d (kept in memory for erased sessions)", dropped)
            except Exception:  # a key store that cannot be read now: the next interval tries again
                log.exception("serving erasure-sweep failed")
