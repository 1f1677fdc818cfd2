"""Which loaded version takes each request, and how many requests each version has in flight.

A request takes a lease on a slot when it starts and keeps it to its last token, so a switch only
affects requests that start after it; a replaced slot's engine is shut down once its leases end.
Everything here runs on the server's event loop (one thread), so plain counters are atomic.

An in-place update swaps the weights under a slot's engine, so a lease alone cannot name the weights:
the update `hold`s the router first. New requests then lease a *held* slot already labelled with the
new version, whose engine waits (HeldEngine) until the update is done; the old slot's leases drain on
the old weights before a single weight changes. So every request's tokens come from the version it
is labelled with, and none fails for the update.

A LoRA adapter version shares its base's engine: its slot carries the adapter, and its engine
(AdapterEngine) runs every request under it. Switching between two adapters of one base is then a
plain switch: requests in flight keep the adapter they started on, new ones take the new adapter.

A tenant may have a champion adapter of its own (serving/swap/groups.py, TenantGroup): its requests lease that slot
while the adapter applies to the weights the champion's engine serves, and the shared champion otherwise.

The canary takes canary_fraction of the SESSIONS, not of the requests, so that every call of a session is served by
one version and the trainer's gate can compare the outcome of whole sessions served by each (trainer/gate/canary.py):
a session goes to the canary when a hash of (the canary's version, the session's keyed pseudonym) falls below
canary_fraction. The pseudonym is keyed by the tenant's secret in the key store (liverl.privacy.pseudonyms), which
every replica shares, so every replica sends a session the same way; a client cannot choose session ids the canary
will take (with a key in the source it could, and send its good sessions to one version and its bad ones to the
other: the gate would then judge the client's choice, not the candidate); and each candidate draws its sessions
afresh. What a client learns once a session is served (each reply names its version) is not hidden. A call that
names no session takes the canary at random. While a tenant's key cannot be read, its sessions are placed by a
secret of this process: still whole and unpredictable, only no longer alike on other replicas.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from serving.engines.engine import Adapter, Delta, Engine, Sampling

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger("liverl.serving")


@dataclass(eq=False)
class Slot:
    """One loaded policy version."""

    version: str
    engine: Engine
    tokenizer: PreTrainedTokenizerBase  # the version's own tokenizer
    policy_dir: Path
    source_uri: str
    adapter: Adapter | None = None  # set for a LoRA version: policy_dir is then its base's weights folder
    loaded_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    in_flight: int = 0
    served: int = 0
    failed: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=2048))  # seconds, most recent requests
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()

    @functools.cached_property
    def vocab_size(self) -> int:
        """Ids a prompt may hold, added tokens included (len(tokenizer) costs microseconds per call)."""
        return len(self.tokenizer)

    @property
    def adapter_name(self) -> str:
        """The LoRA adapter this version's requests run under ("" for full weights)."""
        return self.adapter.name if self.adapter is not None else ""

    @property
    def weights_version(self) -> str:
        """The registry version of the full weights under this version's requests (an adapter's base)."""
        return self.adapter.base_version if self.adapter is not None else self.version

    def acquire(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def release(self, ok: bool, latency_s: float) -> None:
        self.in_flight -= 1
        self.served += 1
        self.failed += 0 if ok else 1
        self.latencies.append(latency_s)
        if self.in_flight == 0:
            self._idle.set()

    def reset_stats(self) -> None:
        self.served = self.failed = 0
        self.latencies.clear()

    def p99_latency_s(self) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    async def drained(self, timeout_s: float) -> bool:
        """Wait until no request holds this slot; False when timeout_s passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False


def process_session_key(secret: bytes) -> Callable[[str, str], str]:
    """A session's keyed pseudonym under a secret of this process alone: a router without the key store's (tests, a
    lone replica). Replicas that each hold their own would place one session differently."""
    from liverl.privacy.pseudonyms import keyed_digest

    return lambda tenant, session_id: f"s-{keyed_digest(secret, 's', f'{tenant}/{session_id}')}"


class Router:
    def __init__(self, canary_fraction: float = 0.0, rng: random.Random | None = None,
                 session_key: Callable[[str, str], str] | None = None):
        """session_key(tenant, session_id): the session's secret keyed name that places it (the server sets the
        key store's session pseudonym; without one, a key of this process's own)."""
        self.champion: Slot | None = None
        self.canary: Slot | None = None
        self.canary_fraction = canary_fraction
        self._rng = rng or random.Random()
        self._process_key = process_session_key(secrets.token_bytes(32))
        self.session_key = session_key or self._process_key
        self._unplaced: set[str] = set()  # tenants whose key could not be read (logged once each)
        self.tenants: dict[str, Slot] = {}  # tenant -> its own champion adapter (serving/swap/groups.py)
        self.tenant_canaries: dict[str, Slot] = {}  # tenant -> its canary adapter, for canary_fraction of its requests

    def acquire(self, tenant: str = "", session_id: str = "") -> Slot:
        """The slot for a new request of tenant, leased: call slot.release() when the request ends. session_id: the
        call's session, which the canary takes whole or not at all ("": this request alone, at random)."""
        slot = self.champion
        if slot is None:
            raise RuntimeError("no policy version is loaded yet")
        own = self.tenants.get(tenant) if self.tenants else None
        if self.tenant_canaries:
            canary = self.tenant_canaries.get(tenant)
            if canary is not None and fits_champion(canary, slot) and self._to_canary(tenant, session_id, canary):
                own = canary
        if own is not None and fits_champion(own, slot):
            own.acquire()
            return own
        if self.canary is not None and self._to_canary(tenant, session_id, self.canary):
            slot = self.canary
        slot.acquire()
        return slot

    def _to_canary(self, tenant: str, session_id: str, canary: Slot) -> bool:
        """Whether this call goes to `canary`: its session's place in [0, 1), fixed for the canary's version, below
        canary_fraction."""
        if not session_id:
            return self._rng.random() < self.canary_fraction
        try:
            name = self.session_key(tenant, session_id)
        except Exception:  # the key store unreadable: this process's key (not the champion: the tenant's sessions
            # would then all go to one side of the gate's comparison)
            if tenant not in self._unplaced:
                self._unplaced.add(tenant)
                log.warning("the canary places tenant %r's sessions by this process's own key (its key store key "
                            "is unreadable): other replicas may place them otherwise", tenant, exc_info=True)
            name = self._process_key(tenant, session_id)
        digest = hashlib.blake2b(f"{canary.version}/{name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0 ** 64 < self.canary_fraction

    def switch(self, new: Slot) -> Slot | None:
        """Make new the champion; returns the one it replaced (still loaded, still draining)."""
        old, self.champion = self.champion, new
        return old

    def hold(self, new: Slot) -> Hold:
        """Start an in-place update to `new`, which shares the champion's engine: from now on requests
        lease `new` and wait; the replaced champion drains. End it with release(), release_to() or fail()."""
        previous = self.switch(new)
        if previous is None or underlying(previous.engine) is not underlying(new.engine):
            self.champion = previous
            raise ValueError("an in-place update needs a slot on the serving engine: build it with "
                             "Slot(version, champion.engine, ...)")
        return Hold(self, new, previous)


def fits_champion(slot: Slot, champion: Slot) -> bool:
    """Whether slot's adapter applies to the weights the champion's engine serves now (a tenant's adapter of an
    older base falls back to the shared champion until the tenant's next version)."""
    return (slot.adapter is not None and slot.adapter.base_version == champion.weights_version
            and underlying(slot.engine) is underlying(champion.engine))


class AdapterEngine:
    """A LoRA version's engine: its base's engine, with every request run under the adapter. Updating its
    weights updates the base engine's and loads the adapter again (a reload drops vLLM's adapters)."""

    name = "adapter"

    def __init__(self, engine: Engine, adapter: Adapter):
        self.engine = engine
        self.adapter = adapter
        self.policy_dir = engine.policy_dir

    def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                 final_only: bool = False) -> AsyncIterator[Delta]:
        return self.engine.generate(prompt_token_ids, sampling, request_id, final_only, adapter=self.adapter)

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str) -> list[float]:
        """The weight probe's logprobs under the adapter (serving/swap/weight_check.py)."""
        return await self.engine.prompt_logprobs(prompt_token_ids, request_id, adapter=self.adapter)

    async def update_weights(self, policy_dir: Path, version: str) -> dict:
        report = await self.engine.update_weights(policy_dir, version)
        await self.engine.load_adapter(self.adapter)
        return report

    async def shutdown(self) -> None:
        await self.engine.shutdown()


class HeldEngine:
    """Stands in for an engine whose weights are being replaced: generate() waits until the update is
    over, then runs on the engine it was released to (or raises why the version could not be served)."""

    name = "held"

    def __init__(self, engine: Engine):
        self.engine = engine  # the engine being updated (what close and retire must not shut down twice)
        self.policy_dir = engine.policy_dir
        self._released: asyncio.Future = asyncio.get_running_loop().create_future()

    def release(self, engine: Engine) -> None:
        if not self._released.done():
            self._released.set_result(engine)

    def fail(self, error: BaseException) -> None:
        if not self._released.done():
            self._released.set_exception(error)
            self._released.exception()  # retrieved: no "never retrieved" warning when nobody was held

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                       final_only: bool = False) -> AsyncIterator[Delta]:
        engine = await asyncio.shield(self._released)
        async for delta in engine.generate(prompt_token_ids, sampling, request_id, final_only):
            yield delta


class Hold:
    """An in-place update in progress: `slot` takes new requests (held), `previous` drains."""

    def __init__(self, router: Router, slot: Slot, previous: Slot):
        self.router = router
        self.slot = slot
        self.previous = previous
        self.engine = slot.engine  # the real engine, whose weights change
        self.held = HeldEngine(self.engine)
        self.started = time.monotonic()
        slot.engine = self.held

    def release(self) -> float:
        """The new weights are in: held requests run. Returns how long new requests were held (s)."""
        self.slot.engine = self.engine
        self.held.release(self.engine)
        return time.monotonic() - self.started

    def release_to(self, engine: Engine) -> float:
        """The version ended up on another engine (the two-engine fallback): held requests run there."""
        self.engine = engine
        return self.release()

    def fail(self, error: BaseException) -> float:
        """The version cannot be served: held requests fail with error, new ones go to the previous slot."""
        self.held.fail(error)
        self.router.champion = self.previous
        return time.monotonic() - self.started


def underlying(engine: Engine) -> Engine:
    """The real engine behind a slot's engine (a held slot's stands in for the one being updated, an adapter
    slot's runs on its base's)."""
    while isinstance(engine, (HeldEngine, AdapterEngine)):
        engine = engine.engine
    return engine
