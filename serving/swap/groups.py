"""The groups a rollout follows, one alias each (serving/swap/rollout.py): what serves the group, what it replaced, the
versions it refused, and the ways a version of the group is brought in, brought back and freed.

- SharedGroup follows `serving.alias` (`champion`): the policy every request without an adapter of its own runs on.
  A version comes in by one of three ways: as a LoRA adapter of the base the engine serves (serving/swap/adapter_swap.py,
  no pause), in place (serving/swap/in_place.py: the engine loads the new weights under held requests, falling back
  to a second engine when the load fails), or on a second engine (swap_mode = "two_engine": started beside the
  serving one, smoke-tested there, switched to with one assignment; requests that started before keep the old engine
  to their last token).
- TenantGroup follows `champion-<tenant>`: an adapter of the base the shared group's engine serves, added to that
  engine under a name and id of its own and loaded on demand (serving/engines/lora_slots.py), routed to that tenant's
  requests alone (Router.tenants), and its canary alias's version (`<serving.canary_alias>-<tenant>`) to a share of
  them (Router.tenant_canaries). Nothing is held; the other tenants' routes are untouched. A tenant whose adapter
  applies to another base than the one served gets the shared policy until its alias names an adapter of that base.
"""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
from collections.abc import Callable

from liverl.contracts import names
from liverl.io.lease import RegistryLease
from serving.engines.engine import Engine
from serving.engines.lora_slots import LoraSlots, TenantEngine
from serving.router import Slot, underlying
from serving.swap.downloads import download_folder
from serving.swap.in_place import can_update_in_place, on_champion_engine, swap_in_place
from serving.swap.result import BroughtIn, SwapError
from serving.swap.version_loader import VersionLoader

log = logging.getLogger("liverl.serving.swap")


class RolloutGroup:
    """One alias followed and the state of its rollout. Subclasses say how its versions come in and go."""

    kind = ""  # prefix of its events in the log lines ("" or "tenant-")
    nobody = ""  # what serves the group when no version of its own does ("shared" for a tenant)

    def __init__(self, alias: str, loader: VersionLoader, update_lease: RegistryLease | None, tenant: str = ""):
        self.alias = alias
        self.tenant = tenant  # "" for the shared group
        self.loader = loader
        self.router = loader.router
        self.config = loader.config
        self.update_lease = update_lease  # the fleet's lease for this alias; None without a registry
        self.previous: Slot | None = None  # the replaced version, kept for a rollback
        self.refused: set[str] = set()  # versions rolled back or failing their smoke test
        self.last_swap = -math.inf  # time.monotonic() of the last switch
        self.probation: asyncio.Task | None = None
        self.update_windows: list[tuple[float, float]] = []  # (start, end) wall times of each update's lease
        self.waiting: tuple[str, str] = ("", "")  # (version, reason) last said waiting for, said once

    @property
    def label(self) -> str:
        """What the log lines name the group by, before the version."""
        return f"tenant={self.tenant} " if self.tenant else ""

    @property
    def role(self) -> str:
        """The role label of liverl_serving_version_info for the version serving this group."""
        return self.alias if self.tenant else "champion"

    @property
    def serving(self) -> Slot | None:
        raise NotImplementedError

    def route(self, slot: Slot | None) -> Slot | None:
        """Send the group's new requests to slot; returns the slot they went to."""
        raise NotImplementedError

    @property
    def canary(self) -> Slot | None:
        return None

    @canary.setter
    def canary(self, slot: Slot | None) -> None:
        raise ValueError(f"group {self.alias} takes no canary")

    def version(self) -> str:
        serving = self.serving
        return serving.version if serving is not None else ""

    def in_use(self) -> list[Slot]:
        return [s for s in (self.serving, self.canary, self.previous) if s is not None]

    def can_roll_back(self) -> bool:
        return self.previous is not None

    def no_rollback(self) -> str:
        return "no previous version is known to roll back to: use ForceSwap with a version"

    async def why_wait(self, version: str) -> str | None:
        """Why version cannot come in yet, though it is not refused (None: it may)."""
        return None

    async def bring_in(self, version: str) -> BroughtIn:
        """Make version serve the group. Raises SwapError (nothing changed)."""
        raise NotImplementedError

    async def bring_back(self, target: Slot | None, bad: Slot) -> BroughtIn:
        """Serve target (the previous version) again in place of bad. Raises (bad still serving)."""
        raise NotImplementedError

    async def load_canary(self, version: str) -> Slot:
        raise SwapError(f"group {self.alias} takes no canary")

    def keeps_after_probation(self, previous: Slot, slot: Slot) -> bool:
        """Whether the replaced version stays ready for a rollback once slot passed its probation."""
        return True

    async def free(self, slot: Slot) -> None:
        """Free a replaced version no request uses any more."""
        raise NotImplementedError


class SharedGroup(RolloutGroup):
    """The shared policy: the router's champion (and canary)."""

    @property
    def serving(self) -> Slot | None:
        return self.router.champion

    def route(self, slot: Slot | None) -> Slot | None:
        return self.router.switch(slot)

    @property
    def canary(self) -> Slot | None:
        return self.router.canary

    @canary.setter
    def canary(self, slot: Slot | None) -> None:
        self.router.canary = slot

    async def bring_in(self, version: str) -> BroughtIn:
        loader, adapters = self.loader, self.loader.adapters
        fetched = await loader.fetch(version)
        champion = self.router.champion
        if adapters.fits_running_engine(fetched, champion):
            try:
                replaced, _timings = await adapters.switch_to(fetched, self.router, loader.smoke)
            except Exception as error:
                raise SwapError(f"adapter version {version} failed to load or its smoke generation: {error}") from error
            return BroughtIn(fetched, replaced, "adapter")
        if can_update_in_place(self.config, champion):
            return await swap_in_place(on_champion_engine(fetched, champion), self.router, loader, loader.metrics,
                                       loader.say)
        slot = await loader.load(version, fetched=fetched)  # a second engine, smoke-tested before the switch
        return BroughtIn(slot, self.router.switch(slot), "two_engine")

    async def bring_back(self, target: Slot | None, bad: Slot) -> BroughtIn:
        """In place from target's folder (kept while it is the previous version), or by switching back to its adapter
        or engine (two engines: loaded through the probation window only), after the smoke test of a forward swap."""
        if self.loader.adapters.shares_weights(target, bad):  # adapters of one base: back to the one still loaded
            await self.loader.adapters.ready(target)
            await self.loader.smoke(target)
            return BroughtIn(target, self.router.switch(target), "adapter")
        if underlying(target.engine) is underlying(bad.engine):
            return await swap_in_place(target, self.router, self.loader, self.loader.metrics, self.loader.say)
        await self.loader.smoke(target)  # its engine is still up: a switch back
        return BroughtIn(target, self.router.switch(target), "two_engine")

    async def load_canary(self, version: str) -> Slot:
        return await self.loader.load(version, canary=True)

    def keeps_after_probation(self, previous: Slot, slot: Slot) -> bool:
        return underlying(previous.engine) is underlying(slot.engine)  # a second engine is freed; a folder kept

    async def free(self, slot: Slot) -> None:
        """Shut the version's engine down unless a version in use shares it (in place), once the tenants' requests
        on it are done; delete its downloaded folder once nothing needs it."""
        self.loader.loaded.discard(slot)
        engine = underlying(slot.engine)
        if not self._engine_in_use(engine):
            await self._drain_tenants_on(engine)
        engine_up = self._engine_in_use(engine)  # a rollback may have brought it back meanwhile
        if not engine_up:
            await engine.shutdown()
        await self.loader.adapters.release(slot, self.in_use(), engine_up)
        versions_dir = self.loader.versions_dir
        download = download_folder(versions_dir, slot.policy_dir)
        if download is not None and all(download_folder(versions_dir, s.policy_dir) != download
                                        for s in self.in_use()):
            await asyncio.to_thread(shutil.rmtree, download, True)

    async def _drain_tenants_on(self, engine: Engine) -> None:
        """Let the requests of tenants' adapters on an engine about to shut down finish first. New ones no longer
        start there: a tenant's adapter serves only on the champion's engine (Router.acquire), the shared
        champion takes them until the tenant's alias names an adapter of the new base."""
        on_engine = [s for s in self.router.tenants.values() if underlying(s.engine) is engine]
        drained = await asyncio.gather(*(s.drained(self.config.drain_timeout_s) for s in on_engine))
        for tenant_slot, done in zip(on_engine, drained):
            if not done:
                log.warning("tenant version %s still had %d requests after %.0f s; shutting its engine down anyway",
                            tenant_slot.version, tenant_slot.in_flight, self.config.drain_timeout_s)

    def _engine_in_use(self, engine: Engine) -> bool:
        return any(underlying(s.engine) is engine for s in self.in_use())


class TenantGroup(RolloutGroup):
    """One tenant's champion adapter: Router.tenants[tenant]. Rolling back with no previous adapter of its own
    leaves the tenant on the shared policy."""

    kind = "tenant-"
    nobody = "shared"

    def __init__(self, tenant: str, loader: VersionLoader, update_lease: RegistryLease | None,
                 places: Callable[[Engine], LoraSlots]):
        super().__init__(names.tenant_champion_alias(tenant), loader, update_lease, tenant)
        self.places = places  # the tenants' LoRA places on an engine (one LoraSlots per engine, shared)

    @property
    def serving(self) -> Slot | None:
        return self.router.tenants.get(self.tenant)

    def route(self, slot: Slot | None) -> Slot | None:
        old = self.router.tenants.get(self.tenant)
        if slot is None:
            self.router.tenants.pop(self.tenant, None)
        else:
            self.router.tenants[self.tenant] = slot  # one assignment: this tenant's next request, nobody else's
        return old

    @property
    def canary(self) -> Slot | None:
        return self.router.tenant_canaries.get(self.tenant)

    @canary.setter
    def canary(self, slot: Slot | None) -> None:
        if slot is None:
            self.router.tenant_canaries.pop(self.tenant, None)
        else:
            self.router.tenant_canaries[self.tenant] = slot

    def can_roll_back(self) -> bool:
        return self.serving is not None

    def no_rollback(self) -> str:
        return f"tenant {self.tenant} has no adapter of its own to roll back"

    async def why_wait(self, version: str) -> str | None:
        """An adapter of another base than the one served waits (not refused: the shared group may move to it)."""
        champion = self.router.champion
        registry = self.loader.registry
        try:
            base = (await asyncio.to_thread(registry.tags, version)).get(names.TAG_BASE_VERSION, "") if registry else ""
        except Exception as error:  # registry down: the tenant keeps what it has, the next look tries again
            return f"could not read the tags of version {version}: {error}"
        if champion is not None and (not base or base == champion.weights_version):
            return None
        served = champion.weights_version if champion is not None else ""
        if self.waiting != (version, served):
            self.waiting = (version, served)
            self.loader.say(f"serving tenant-swap-waiting tenant={self.tenant} version={version} base={base} "
                            f"serving_base={served}")
        current = self.version() or self.nobody
        return (f"version {version} is an adapter of base {base!r}, not of the base served here ({served!r}): "
                f"tenant {self.tenant} keeps {current}")

    async def bring_in(self, version: str) -> BroughtIn:
        try:
            slot = await self._bring_up(version)
        except SwapError:
            raise
        except Exception as error:
            raise SwapError(f"version {version} cannot serve tenant {self.tenant}: {error}") from error
        return BroughtIn(slot, self.route(slot), "adapter")

    async def _bring_up(self, version: str, canary: bool = False) -> Slot:
        """The smoke-tested slot of an adapter version on the champion's engine. Raises why it cannot serve."""
        champion = self.router.champion
        fetched = await self.loader.fetch(version, canary=canary)
        if fetched.adapter is None:
            raise ValueError(f"version {version} holds full weights, not an adapter: a tenant's alias must name an "
                             "adapter version of the served base")
        if not self.loader.adapters.fits_running_engine(fetched, champion):
            raise ValueError(f"adapter version {version} applies to base {fetched.adapter.base_version}, which the "
                             f"serving engine does not run ({champion.weights_version if champion else ''})")
        engine = underlying(champion.engine)
        slot = Slot(version, TenantEngine(engine, fetched.adapter, self.places(engine)), fetched.tokenizer,
                    fetched.policy_dir, fetched.source_uri, adapter=fetched.adapter)
        try:
            await self.loader.smoke(slot)
        except BaseException:
            await self.free(slot)
            raise
        return slot

    async def load_canary(self, version: str) -> Slot:
        try:
            return await self._bring_up(version, canary=True)
        except SwapError:
            raise
        except Exception as error:
            raise SwapError(f"version {version} cannot be tenant {self.tenant}'s canary: {error}") from error

    async def bring_back(self, target: Slot | None, bad: Slot) -> BroughtIn:
        self.route(target)  # its adapter is loaded again on demand; None: the shared policy
        return BroughtIn(target, bad, "adapter")

    async def free(self, slot: Slot) -> None:
        """Remove the version's adapter from its engine's places and delete its download."""
        engine = slot.engine
        if isinstance(engine, TenantEngine):
            await engine.slots.forget(slot.adapter)
        await self.loader.adapters.release(slot, self.in_use(), engine_up=False)

