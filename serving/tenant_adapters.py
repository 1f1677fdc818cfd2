"""A champion adapter per tenant: follow each tenant's registry alias and roll its adapter as a full swap is
rolled, without touching any other tenant's routing.

A tenant's alias (liverl.contracts.names.tenant_champion_alias) names an adapter version of the base the shared
champion's engine serves. Rolling it: fetch it (the swapper's download and signature check), add it to that engine
under a name and id of its own, smoke-test it (the swapper's smoke generation and weight probe), then point the
tenant's route at it (Router.tenants). Requests in flight finish on the adapter they started on; none waits. A
probation window watches its error rate and p99 latency, and a breach (or an admin) rolls the tenant back to its
previous adapter, or to the shared policy when it had none, tags the version and refuses it until the alias moves.

The adapters share the engine's LoRA places through LoraSlots: cold ones are loaded at their tenant's next
request, the least recently used idle one removed first. A tenant whose adapter applies to another base than the
one served now gets the shared policy (Router.acquire) until its alias names an adapter of the served base.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from serving.adapter_swap import AdapterSwaps
from serving.engine import Adapter, Delta, Engine, Sampling
from serving.fleet import tag_rolled_back
from serving.lora_slots import LoraSlots
from serving.router import AdapterEngine, Router, Slot, underlying

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry as Registry

log = logging.getLogger("liverl.serving.tenants")

Fetch = Callable[[str], Awaitable[Slot]]
Smoke = Callable[[Slot], Awaitable[None]]


class TenantEngine(AdapterEngine):
    """A tenant version's engine: the shared engine under the tenant's adapter, loaded on demand (LoraSlots)."""

    name = "tenant-adapter"

    def __init__(self, engine: Engine, adapter: Adapter, slots: LoraSlots):
        super().__init__(engine, adapter)
        self.slots = slots

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                       final_only: bool = False) -> AsyncIterator[Delta]:
        async with self.slots.use(self.adapter):
            self._check_base()
            async for delta in self.engine.generate(prompt_token_ids, sampling, request_id, final_only,
                                                    adapter=self.adapter):
                yield delta

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str) -> list[float]:
        async with self.slots.use(self.adapter):
            self._check_base()
            return await self.engine.prompt_logprobs(prompt_token_ids, request_id, adapter=self.adapter)

    async def update_weights(self, policy_dir: Path, version: str) -> dict:
        raise RuntimeError("a tenant's adapter never updates the shared engine's weights")

    def _check_base(self) -> None:
        """Refuse to start on weights other than the base the adapter was loaded for. The router stops sending a
        tenant here once the shared weights change; this catches a request it leased just before, which would
        otherwise run on the new weights and be recorded as the tenant's version."""
        if getattr(self.engine, "updating", False) or Path(self.engine.policy_dir) != Path(self.policy_dir):
            raise RuntimeError(f"adapter {self.adapter.name} applies to base version {self.adapter.base_version}, "
                               "whose weights this engine is replacing: retry the request (it will run on the "
                               "shared policy until the tenant has an adapter of the new base)")


@dataclass
class TenantRoll:
    ok: bool
    tenant: str
    version: str  # what serves the tenant now ("" for the shared policy)
    message: str


@dataclass
class TenantState:
    current: Slot | None = None
    previous: Slot | None = None  # kept for a rollback (its adapter is loaded again on demand)
    refused: set[str] = field(default_factory=set)  # versions rolled back or failing their smoke test
    waiting: tuple[str, str] = ("", "")  # (version, served base) a base mismatch was said for
    last_roll: float = -float("inf")
    probation: asyncio.Task | None = None


class TenantAdapters:
    def __init__(self, config: ServingConfig, router: Router, registry: Registry, fetch: Fetch, smoke: Smoke,
                 adapters: AdapterSwaps, say: Callable[[str], None] = print):
        self.config = config
        self.router = router
        self.registry = registry
        self.fetch = fetch  # version -> an adapter slot with no engine (downloaded, signature checked)
        self.smoke = smoke  # the swapper's smoke generation and weight probe
        self.adapters = adapters  # the swapper's: one lora id counter for shared and tenant adapters
        self.say = say
        self.states: dict[str, TenantState] = {}
        self.slots: LoraSlots | None = None  # the tenants' LoRA places on the champion's engine
        self._lock = asyncio.Lock()
        self._ignored: set[str] = set()  # discovered tenants past max_tenants, said once
        self._background: set[asyncio.Task] = set()

    # -- following the aliases -------------------------------------------------------------------------

    def followed(self, aliases: dict[str, str]) -> dict[str, str]:
        """tenant -> the version its alias names, for the tenants followed (watched first, then discovered)."""
        t = self.config.tenants
        tenants = list(dict.fromkeys(t.watch))
        if t.discover:
            prefix = f"{names.ALIAS_CHAMPION}-"
            tenants += sorted(a[len(prefix):] for a in aliases
                              if a.startswith(prefix) and names.TENANT_NAME.fullmatch(a[len(prefix):]))
            tenants = list(dict.fromkeys(tenants))
        for tenant in tenants[t.max_tenants:]:
            if tenant not in self._ignored:
                self._ignored.add(tenant)
                self.say(f"serving tenant-ignored tenant={tenant} reason=max_tenants max_tenants={t.max_tenants}")
        return {tenant: aliases[names.tenant_champion_alias(tenant)] for tenant in tenants[:t.max_tenants]
                if names.tenant_champion_alias(tenant) in aliases}

    async def watch(self) -> None:
        while True:
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # registry down: every tenant keeps what it has
                log.warning("tenant watcher: %s", error)
            await asyncio.sleep(self.config.watch_interval_s)

    async def check_once(self) -> list[TenantRoll]:
        """One look at every followed alias (one registry call); roll the tenants whose alias moved."""
        aliases = await asyncio.to_thread(self.registry.aliases)
        rolls = []
        for tenant, version in self.followed(aliases).items():
            state = self.states.setdefault(tenant, TenantState())
            current = state.current.version if state.current is not None else ""
            if version == current or version in state.refused:
                continue
            if time.monotonic() - state.last_roll < self.config.min_swap_interval_s:
                continue
            rolls.append(await self.roll(tenant, version))
        return rolls

    # -- rolling ---------------------------------------------------------------------------------------

    async def roll(self, tenant: str, version: str) -> TenantRoll:
        """Put version in service for tenant alone. Never raises; the result says what happened."""
        async with self._lock:
            state = self.states.setdefault(tenant, TenantState())
            current = state.current.version if state.current is not None else ""
            if version == current:
                return TenantRoll(True, tenant, version, f"version {version} already serves tenant {tenant}")
            champion = self.router.champion
            base = (await asyncio.to_thread(self.registry.tags, version)).get(names.TAG_BASE_VERSION, "")
            if champion is None or (base and base != champion.weights_version):
                served = champion.weights_version if champion is not None else ""
                if state.waiting != (version, served):  # not refused: the shared base may still move to its base
                    state.waiting = (version, served)
                    self.say(f"serving tenant-swap-waiting tenant={tenant} version={version} base={base} "
                             f"serving_base={served}")
                return TenantRoll(False, tenant, current, f"version {version} is an adapter of base {base!r}, not "
                                  f"of the base served here ({served!r}): tenant {tenant} keeps {current or 'shared'}")
            self.say(f"serving tenant-swap-start tenant={tenant} version={version} previous={current or 'shared'}")
            try:
                slot = await self._bring_up(version, champion)
            except Exception as error:
                state.refused.add(version)
                await self._tag(version, "tenant-smoke-failed", {"tenant": tenant, "error": str(error)[:500]})
                self.say(f"serving tenant-swap-refused tenant={tenant} version={version} "
                         f"serving={current or 'shared'} error={str(error)[:200]!r}")
                return TenantRoll(False, tenant, current, f"version {version} refused for tenant {tenant}: {error}")
            retired, state.previous, state.current = state.previous, state.current, slot
            self.router.tenants[tenant] = slot  # one assignment: this tenant's next request, nobody else's
            state.refused.discard(version)
            state.last_roll = time.monotonic()
            self._spawn(self._retire(retired))
            self._start_probation(tenant, state, slot)
            self.say(f"serving tenant-swap tenant={tenant} version={version} previous={current or 'shared'} "
                     f"adapter={slot.adapter.name} base={slot.adapter.base_version}")
            return TenantRoll(True, tenant, version, f"tenant {tenant} switched from {current or 'shared'} to "
                              f"{version}")

    async def _bring_up(self, version: str, champion: Slot) -> Slot:
        """The smoke-tested slot of an adapter version on the champion's engine. Raises why it cannot serve."""
        fetched = await self.fetch(version)
        if fetched.adapter is None:
            raise ValueError(f"version {version} holds full weights, not an adapter: a tenant's alias must name an "
                             "adapter version of the served base")
        if not self.adapters.fits_running_engine(fetched, champion):
            raise ValueError(f"adapter version {version} applies to base {fetched.adapter.base_version}, which the "
                             f"serving engine does not run ({champion.weights_version})")
        engine = underlying(champion.engine)
        if self.slots is None or self.slots.engine is not engine:
            self.slots = LoraSlots(engine, self.config.tenants.max_resident_adapters)
        slot = Slot(version, TenantEngine(engine, fetched.adapter, self.slots), fetched.tokenizer, fetched.policy_dir,
                    fetched.source_uri, adapter=fetched.adapter)
        try:
            await self.smoke(slot)
        except BaseException:
            await self._free(slot)
            raise
        return slot

    async def rollback(self, tenant: str, reason: str, detail: dict | None = None, tag: bool = True) -> TenantRoll:
        """Serve tenant its previous adapter again (the shared policy when it had none); the other tenants keep
        theirs. The version rolled back is tagged and refused until the tenant's alias moves elsewhere."""
        async with self._lock:
            state = self.states.get(tenant)
            bad = state.current if state is not None else None
            if bad is None:
                return TenantRoll(False, tenant, "", f"tenant {tenant} has no adapter of its own to roll back")
            if state.probation is not None and state.probation is not asyncio.current_task():
                state.probation.cancel()
            target = state.previous
            if target is None:
                self.router.tenants.pop(tenant, None)
            else:
                self.router.tenants[tenant] = target
            state.current, state.previous = target, None
            state.refused.add(bad.version)
            state.last_roll = time.monotonic()
            now = target.version if target is not None else ""
            self.say(f"serving tenant-rollback tenant={tenant} version={now or 'shared'} from={bad.version} "
                     f"reason={reason}")
            self._spawn(self._retire(bad))
        if tag:
            await self._tag(bad.version, reason, {"tenant": tenant, **(detail or {})})
        return TenantRoll(True, tenant, now, f"tenant {tenant} rolled back from {bad.version} to {now or 'shared'}")

    # -- probation and retirement ----------------------------------------------------------------------

    def _start_probation(self, tenant: str, state: TenantState, slot: Slot) -> None:
        if state.probation is not None:
            state.probation.cancel()
        state.probation = asyncio.create_task(self._watch_probation(tenant, slot))

    async def _watch_probation(self, tenant: str, slot: Slot) -> None:
        """Judge the tenant's new adapter for probation_s, as the swapper judges a new champion."""
        c = self.config
        deadline = time.monotonic() + c.probation_s
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if self.router.tenants.get(tenant) is not slot:
                return
            if slot.served >= c.probation_min_requests:
                error_rate = slot.failed / slot.served
                p99 = slot.p99_latency_s()
                if error_rate > c.max_error_rate or p99 > c.max_p99_latency_s:
                    kind = "error-rate" if error_rate > c.max_error_rate else "latency"
                    await self.rollback(tenant, kind, {"error_rate": error_rate, "p99_latency_s": p99,
                                                       "requests": slot.served})
                    return

    def _in_use(self) -> list[Slot]:
        return [s for state in self.states.values() for s in (state.current, state.previous) if s is not None]

    async def _retire(self, slot: Slot | None) -> None:
        """Remove a replaced tenant version's adapter once its requests are done, and delete its download."""
        if slot is None or slot in self._in_use():
            return
        if not await slot.drained(self.config.drain_timeout_s):
            log.warning("tenant version %s still had %d requests after %.0f s; removing its adapter anyway",
                        slot.version, slot.in_flight, self.config.drain_timeout_s)
        if slot not in self._in_use():
            await self._free(slot)

    async def _free(self, slot: Slot) -> None:
        engine = slot.engine
        if isinstance(engine, TenantEngine):
            await engine.slots.forget(slot.adapter)
        await self.adapters.release(slot, self._in_use(), engine_up=False)  # the download folder

    async def _tag(self, version: str, reason: str, detail: dict) -> None:
        try:
            await asyncio.to_thread(tag_rolled_back, self.registry, version, reason, detail)
        except Exception as error:  # the decision stands; the tag is best effort
            log.warning("could not tag version %s after %s: %s", version, reason, error)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        tasks = [*self._background, *(s.probation for s in self.states.values() if s.probation is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
