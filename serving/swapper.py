"""Hot-swap: follow the registry alias and put each new version into service without a failed request.

Each version comes in by one of three modes, a file each:
- in place (serving.swap_mode = "in_place", the default; serving/in_place_swap.py): the serving engine loads the
  new weights under held requests, falling back to a second engine when the load fails;
- on a second engine (swap_mode = "two_engine"; serving/second_engine_swap.py): started beside the serving one
  and switched to with one assignment;
- as a LoRA adapter of the base the engine serves (serving/adapter_swap.py): added to the running engine, no pause.
Whatever the mode, the version passes its smoke test (serving/version_loader.py) on the engine that will serve it
before any request reaches it, and every record names the version that really produced its tokens.

Through a probation window the new version's error rate and p99 latency are watched; a breach rolls back, tags the
registry version and refuses it until the alias moves elsewhere. A rollback takes the same modes back, smoke test
included: in place from the previous version's folder (kept on disk), a switch back to its engine or adapter
(still loaded through probation). Replicas following one alias coordinate through the registry (serving/fleet.py,
serving/alias_watcher.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from serving.adapter_swap import AdapterSwaps
from serving.alias_watcher import AliasWatcher
from serving.downloads import download_folder
from serving.fleet import Fleet, tag_rolled_back
from serving.in_place_swap import can_update_in_place, on_champion_engine, swap_in_place
from serving.metrics import ServingMetrics
from serving.router import Router, Slot, underlying
from serving.second_engine_swap import swap_to_second_engine, switch_back
from serving.swap_result import BroughtIn, SignatureRefused, SwapError, SwapResult
from serving.update_lease import update_lease
from serving.version_loader import VersionLoader

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry

__all__ = ["HotSwapper", "SignatureRefused", "SwapError", "SwapResult"]

log = logging.getLogger("liverl.serving.swap")


class HotSwapper:
    def __init__(self, config: ServingConfig, router: Router, metrics: ServingMetrics, registry: ModelRegistry | None,
                 versions_dir: Path, say: Callable[[str], None] = print):
        self.config = config
        self.router = router
        self.metrics = metrics
        self.registry = registry  # None when serving a fixed folder
        self.versions_dir = Path(versions_dir)
        self.say = say  # one structured line per event (stdout of `liverl serve`)
        self.previous: Slot | None = None  # the replaced champion, kept loaded during probation
        self.refused: set[str] = set()  # versions rolled back or failing their smoke test
        self.last_swap = -math.inf  # time.monotonic() of the last switch
        self._lock = asyncio.Lock()
        self._probation: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self.fleet = Fleet(config, registry) if registry is not None else None
        self.adapters = AdapterSwaps(registry, versions_dir)
        self.loader = VersionLoader(config, router, metrics, registry, self.adapters, versions_dir, say)
        self.watcher = AliasWatcher(self)
        self.update_windows: list[tuple[float, float]] = []  # (start, end) wall times of each update's lease

    # -- switching -----------------------------------------------------------------------------------

    async def start_with(self, version: str, policy_dir: Path | None = None) -> Slot:
        slot = await self.loader.load(version, policy_dir)
        self.router.switch(slot)  # the first load is not a swap: the minimum interval starts at the first switch
        self.metrics.serving_version.labels(version, "champion").set(1)
        return slot

    async def swap_to(self, version: str, reason: str = "alias") -> SwapResult:
        """Put version into service (in place, or on a second engine). Never raises; the result says what
        happened. In a fleet it first takes the update lease, and returns not ok when others hold it."""
        async with self._lock:
            current = self.router.champion.version if self.router.champion else ""
            if version == current:
                return SwapResult(True, version, current, f"version {version} is already serving")
            if reason == "alias" and (version in self.refused or
                                      time.monotonic() - self.last_swap < self.config.min_swap_interval_s):
                # Decided by the watcher before a swap or rollback that held this lock ended: stale now.
                return SwapResult(False, current, current, f"version {version} is refused or comes too soon")
            async with self._update_lease(wait_s=0.0) as leased:
                if not leased:
                    return SwapResult(False, current, current, f"{self.config.max_unavailable} other replica(s) "
                                      "hold the fleet's update lease: retry when they are done")
                self.say(f"serving swap-start version={version} previous={current} reason={reason}")
                try:
                    brought = await self._bring_in(version)
                except SwapError as error:
                    unsigned = isinstance(error, SignatureRefused)
                    self.metrics.swaps.labels("unsigned" if unsigned else "smoke_failed").inc()
                    self.refused.add(version)
                    await self._tag(version, "unsigned" if unsigned else "smoke-failed", {"error": str(error)[:500]})
                    self.say(f"serving swap-refused version={version} serving={current} error={str(error)[:200]!r}")
                    return SwapResult(False, current, current, str(error))
                # Recorded before the lease is given back (a registry call): a stop meanwhile loses nothing.
                previous, self.previous = self.previous, brought.replaced
                self._spawn(self._retire(previous))  # a probation still running is over: its old version goes
                self.refused.discard(version)  # an admin may force a version back in
                self.last_swap = time.monotonic()
                self.metrics.swaps.labels("ok").inc()
                self._set_version_gauges(current, version)
                self.say(f"serving swap version={version} previous={current} reason={reason} mode={brought.mode} "
                         f"pause_s={brought.pause_s:.3f}")
                self._start_probation(brought.slot)
                return SwapResult(True, version, current, f"switched from {current} to {version} ({brought.mode})",
                                  brought.pause_s, brought.mode)

    async def _bring_in(self, version: str) -> BroughtIn:
        """Make version the champion, by the mode that fits it. Raises SwapError (the champion unchanged)."""
        canary = self._promote_canary(version)
        if canary is not None:
            return BroughtIn(canary, self.router.switch(canary), "canary")
        fetched = await self.loader.fetch(version)
        champion = self.router.champion
        if self.adapters.fits_running_engine(fetched, champion):
            try:
                replaced, _timings = await self.adapters.switch_to(fetched, self.router, self.loader.smoke)
            except Exception as error:
                raise SwapError(f"adapter version {version} failed to load or its smoke generation: {error}") from error
            return BroughtIn(fetched, replaced, "adapter")
        if can_update_in_place(self.config, champion):
            return await swap_in_place(on_champion_engine(fetched, champion), self.router, self.loader, self.metrics,
                                       self.say)
        return await swap_to_second_engine(fetched, self.router, self.loader)

    async def rollback(self, reason: str, detail: dict | None = None, tag: bool = True) -> SwapResult:
        """Serve the version replaced last again, through the smoke test of a forward swap: in place from its
        folder (kept while it is the previous version), or by switching back to its adapter or engine (two
        engines: loaded through the probation window only; after it, ForceSwap to an explicit version instead)."""
        async with self._lock:
            bad = self.router.champion
            if bad is None:
                return SwapResult(False, "", "", "nothing is serving")
            target = self.previous
            if target is None:
                return SwapResult(False, bad.version, bad.version,
                                  "no previous version is known to roll back to: use ForceSwap with a version")
            if self._probation is not None and self._probation is not asyncio.current_task():
                self._probation.cancel()
            async with self._update_lease(wait_s=self.config.lease_ttl_s):
                try:
                    brought = await self._bring_back(target, bad)
                except Exception as error:
                    log.error("rollback to version %s failed: %s", target.version, error)
                    serving = self.router.champion.version
                    return SwapResult(False, serving, serving, f"rollback to {target.version} failed: {error} "
                                      f"(version {serving} serves on)")
                self.previous = None
                self.refused.add(bad.version)
                self.last_swap = time.monotonic()
                self.metrics.rollbacks.labels(reason).inc()
                self._set_version_gauges(bad.version, target.version)
                self.say(f"serving rollback version={target.version} from={bad.version} reason={reason} "
                         f"pause_s={brought.pause_s:.3f}")
                self._spawn(self._retire(bad))
            if tag:
                await self._tag(bad.version, reason, detail or {})
            return SwapResult(True, target.version, bad.version, f"rolled back from {bad.version} to "
                              f"{target.version}: {reason}", brought.pause_s, brought.mode)

    async def _bring_back(self, target: Slot, bad: Slot) -> BroughtIn:
        """Make the previous version the champion again, by the mode that fits it. Raises (bad still serving)."""
        if self.adapters.shares_weights(target, bad):  # adapters of one base: back to the one still loaded
            await self.adapters.ready(target)
            await self.loader.smoke(target)
            return BroughtIn(target, self.router.switch(target), "adapter")
        if underlying(target.engine) is underlying(bad.engine):
            return await swap_in_place(target, self.router, self.loader, self.metrics, self.say)
        return await switch_back(target, self.router, self.loader)

    def _update_lease(self, wait_s: float):
        return update_lease(self.fleet.update_lease if self.fleet is not None else None, self.config, wait_s,
                            self.update_windows)

    def _promote_canary(self, version: str) -> Slot | None:
        """The canary slot when it already runs this version (loaded and smoke-tested: no second engine)."""
        canary = self.router.canary
        if canary is None or canary.version != version:
            return None
        self.router.canary = None
        self.metrics.serving_version.labels(version, "canary").set(0)
        canary.reset_stats()  # judged as champion from now on, not on its canary share
        return canary

    # -- probation and retiring ----------------------------------------------------------------------

    def _start_probation(self, slot: Slot) -> None:
        if self._probation is not None:
            self._probation.cancel()
        self._probation = asyncio.create_task(self._watch_probation(slot))

    async def _watch_probation(self, slot: Slot) -> None:
        """Judge the new champion for probation_s; roll back on a breach, else free the old version."""
        c = self.config
        deadline = time.monotonic() + c.probation_s  # slot's counts start at its first request (held ones too)
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if self.router.champion is not slot:
                return
            if slot.served >= c.probation_min_requests:
                error_rate = slot.failed / slot.served
                p99 = slot.p99_latency_s()
                if error_rate > c.max_error_rate or p99 > c.max_p99_latency_s:
                    kind = "error-rate" if error_rate > c.max_error_rate else "latency"
                    await self.rollback(kind, {"error_rate": error_rate, "p99_latency_s": p99,
                                               "requests": slot.served})
                    return
        previous = self.previous
        if self.router.champion is slot and previous is not None and \
                underlying(previous.engine) is not underlying(slot.engine):
            self.previous = None  # a second engine is freed; an in-place previous is only a folder: kept
            await self._retire(previous)

    async def _retire(self, slot: Slot | None) -> None:
        """Shut a replaced version's engine down once its requests are done (or drain_timeout_s passed),
        unless a version in use shares it (in place); delete its downloaded folder once nothing needs it."""
        if slot is None or slot in self._in_use():
            return
        if not await slot.drained(self.config.drain_timeout_s):
            log.warning("version %s still had %d requests after %.0f s; shutting down anyway",
                        slot.version, slot.in_flight, self.config.drain_timeout_s)
        if slot in self._in_use():
            return
        self.loader.loaded.discard(slot)
        engine = underlying(slot.engine)
        if not self._engine_in_use(engine):
            await self._drain_tenants_on(engine)
        engine_up = self._engine_in_use(engine)  # a rollback may have brought it back meanwhile
        if not engine_up:
            await engine.shutdown()
        await self.adapters.release(slot, self._in_use(), engine_up)
        download = download_folder(self.versions_dir, slot.policy_dir)
        if download is not None and all(download_folder(self.versions_dir, s.policy_dir) != download
                                        for s in self._in_use()):
            await asyncio.to_thread(shutil.rmtree, download, True)

    async def _drain_tenants_on(self, engine) -> None:
        """Let the requests of tenants' adapters on an engine about to shut down finish first. New ones no longer
        start there: a tenant's adapter serves only on the champion's engine (Router.acquire), the shared
        champion takes them until the tenant's alias names an adapter of the new base."""
        on_engine = [s for s in self.router.tenants.values() if underlying(s.engine) is engine]
        drained = await asyncio.gather(*(s.drained(self.config.drain_timeout_s) for s in on_engine))
        for tenant_slot, done in zip(on_engine, drained):
            if not done:
                log.warning("tenant version %s still had %d requests after %.0f s; shutting its engine down anyway",
                            tenant_slot.version, tenant_slot.in_flight, self.config.drain_timeout_s)

    def _engine_in_use(self, engine) -> bool:
        return any(underlying(s.engine) is engine for s in self._in_use())

    def _in_use(self) -> list[Slot]:
        return [s for s in (self.router.champion, self.router.canary, self.previous) if s is not None]

    def _set_version_gauges(self, old: str, new: str) -> None:
        if old:
            self.metrics.serving_version.labels(old, "champion").set(0)
        self.metrics.serving_version.labels(new, "champion").set(1)

    async def _tag(self, version: str, reason: str, detail: dict) -> None:
        if self.registry is None:
            return
        try:
            await asyncio.to_thread(tag_rolled_back, self.registry, version, reason, detail)
        except Exception as error:  # the rollback itself stands; the tag is best effort
            log.warning("could not tag version %s after %s: %s", version, reason, error)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- canary --------------------------------------------------------------------------------------

    async def set_canary(self, version: str | None) -> None:
        """Load version as the canary (or drop the canary when None or equal to the champion)."""
        current = self.router.canary
        champion = self.router.champion.version if self.router.champion else ""
        if version in (None, champion) or version in self.refused:
            if current is not None:
                self.router.canary = None
                self.metrics.serving_version.labels(current.version, "canary").set(0)
                self.say(f"serving canary-stop version={current.version}")
                self._spawn(self._retire(current))
            return
        if current is not None and current.version == version:
            return
        try:
            slot = await self.loader.load(version)
        except SwapError as error:
            self.refused.add(version)
            await self._tag(version, "canary-smoke-failed", {"error": str(error)[:500]})
            self.say(f"serving canary-refused version={version} error={str(error)[:200]!r}")
            return
        self.router.canary = slot
        self.metrics.serving_version.labels(version, "canary").set(1)
        self.say(f"serving canary version={version} fraction={self.config.canary_fraction}")
        if current is not None:
            self.metrics.serving_version.labels(current.version, "canary").set(0)
            self._spawn(self._retire(current))

    # -- following the alias (serving/alias_watcher.py) -----------------------------------------------

    async def watch(self) -> None:
        await self.watcher.watch()

    async def check_once(self) -> None:
        await self.watcher.check_once()

    async def close(self) -> None:
        for task in [self._probation, *self._background]:
            if task is not None:
                task.cancel()
        slots = {*self.loader.loaded, *self._in_use()}
        engines = {id(underlying(s.engine)): underlying(s.engine) for s in slots if s.engine is not None}
        self.loader.loaded.clear()
        for engine in engines.values():
            await engine.shutdown()
        if self.fleet is not None and self.config.fleet_canary:
            await asyncio.to_thread(self.fleet.canary_lease.release)
