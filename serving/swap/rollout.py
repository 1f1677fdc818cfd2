"""The serving rollout: follow one registry alias per group and put each new version into service without a failed
request, the same way for every group.

A group is the shared policy (`champion`) or one tenant's adapter (`champion-<tenant>`); serving/swap/groups.py
says how a version of each comes in. For every group alike:
- the fleet (serving/swap/fleet.py): the version is taken only under the fleet's update lease for its alias (at most
  `serving.max_unavailable` replicas updating at once), only after the canary replica took it while one lives, and
  never when a replica rolled it back;
- the smoke test (serving/swap/version_loader.py) passes on the engine that will serve it before any request reaches it,
  and every record names the version that really produced its tokens;
- through a probation window its error rate and p99 latency are watched; a breach (or an admin, or another replica's
  rollback) rolls the group back, tags the registry version and refuses it until the alias moves elsewhere;
- a canary alias, where the group takes one, serves its version to a share of the group's requests first.
The watcher (serving/swap/alias_watcher.py) only reports what the aliases name; this module decides.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from liverl.io.signing import SignatureMismatch
from serving.engines.engine import Engine
from serving.engines.lora_slots import LoraSlots
from serving.metrics import ServingMetrics
from serving.router import Router, Slot, underlying
from serving.swap.adapter_swap import AdapterSwaps
from serving.swap.alias_watcher import AliasWatcher, Sighting
from serving.swap.fleet import Fleet, rolled_back_at_ms, tag_rolled_back
from serving.swap.groups import RolloutGroup, SharedGroup, TenantGroup
from serving.swap.result import AdminRefused, BroughtIn, SignatureRefused, SwapError, SwapResult
from serving.swap.update_lease import update_lease
from serving.swap.version_loader import VersionLoader, check_signed

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry

__all__ = ["AdminRefused", "Rollout", "SignatureRefused", "SwapError", "SwapResult"]

log = logging.getLogger("liverl.serving.swap")

ADMIN_REASON_MAX_CHARS = 500  # an admin's reason, as tagged on the registry version
TAG_DRAIN_S = 30.0  # how long a shutdown waits for rollback tags still being written to the registry


class Rollout:
    def __init__(self, config: ServingConfig, router: Router, metrics: ServingMetrics, registry: ModelRegistry | None,
                 versions_dir: Path, say: Callable[[str], None] = print):
        self.config = config
        self.router = router
        self.metrics = metrics
        self.registry = registry  # None when serving a fixed folder
        self.say = say  # one structured line per event (stdout of `liverl serve`)
        self.fleet = Fleet(config, registry) if registry is not None else None
        self.adapters = AdapterSwaps(registry, versions_dir)
        self.loader = VersionLoader(config, router, metrics, registry, self.adapters, versions_dir, say)
        self.watcher = AliasWatcher(config, registry, say) if registry is not None else None
        self.shared = SharedGroup(config.alias, self.loader, self._lease_of(config.alias))
        self.groups: dict[str, RolloutGroup] = {"": self.shared}  # tenant ("" for the shared group) -> its group
        self.tenant_slots: LoraSlots | None = None  # the tenants' LoRA places on the champion's engine
        self._lock = asyncio.Lock()  # one swap or rollback at a time: a tenant's adapter sits on the shared engine
        self._background: set[asyncio.Task] = set()
        self._tagging: set[asyncio.Task] = set()  # rollback tags being written: close() lets them finish
        self._waiting_for: dict[str, str] = {}  # tenant -> the version it waits to take after the fleet's canary
        self._cleared_ms: dict[str, int] = {}  # version -> when the fleet's tags last let this replica take it

    def group(self, tenant: str = "") -> RolloutGroup:
        """The group of tenant's alias ("" the shared one), made on first use."""
        found = self.groups.get(tenant)
        if found is None:
            found = self.groups[tenant] = TenantGroup(tenant, self.loader,
                                                      self._lease_of(names.tenant_champion_alias(tenant)), self._places)
        return found

    def _lease_of(self, alias: str):
        return self.fleet.update_lease(alias) if self.fleet is not None else None

    def _places(self, engine: Engine) -> LoraSlots:
        if self.tenant_slots is None or self.tenant_slots.engine is not engine:
            self.tenant_slots = LoraSlots(engine, self.config.tenants.max_resident_adapters)
        return self.tenant_slots

    # -- switching -----------------------------------------------------------------------------------

    async def start_with(self, version: str, policy_dir: Path | None = None) -> Slot:
        slot = await self.loader.load(version, policy_dir)
        self.router.switch(slot)  # the first load is not a swap: the minimum interval starts at the first switch
        self.metrics.serving_version.labels(version, "champion").set(1)
        return slot

    async def swap_to(self, version: str, reason: str = "alias", tenant: str = "") -> SwapResult:
        """Put version into service for tenant's group (the shared group for ""). Never raises; the result says what
        happened. It first takes the fleet's update lease of the group's alias: not ok when other replicas hold it."""
        group = self.group(tenant)
        async with self._lock:
            current = group.version()
            if version == current:
                return SwapResult(True, version, current, f"version {version} already serves {_whom(group)}",
                                  tenant=tenant)
            if reason == "alias" and (version in group.refused or
                                      time.monotonic() - group.last_swap < self.config.min_swap_interval_s):
                # Decided on an earlier look, before a swap or rollback that held this lock ended: stale now.
                return SwapResult(False, current, current, f"version {version} is refused or comes too soon",
                                  tenant=tenant)
            wait = await group.why_wait(version)
            if wait is not None:
                return SwapResult(False, current, current, wait, tenant=tenant)
            async with self._update_lease(group, wait_s=0.0) as leased:
                if not leased:
                    return SwapResult(False, current, current, f"{self.config.max_unavailable} other replica(s) hold "
                                      f"the fleet's update lease of {group.alias}: retry when they are done",
                                      tenant=tenant)
                return await self._bring_in(group, version, current, reason)

    async def _bring_in(self, group: RolloutGroup, version: str, current: str, reason: str) -> SwapResult:
        was = current or group.nobody
        self.say(f"serving {group.kind}swap-start {group.label}version={version} previous={was} reason={reason}")
        try:
            brought = await self._promote_canary(group, version) or await group.bring_in(version)
        except SwapError as error:
            unsigned = isinstance(error, SignatureRefused)
            self.metrics.swaps.labels("unsigned" if unsigned else "smoke_failed").inc()
            group.refused.add(version)
            await self._tag(group, version, group.kind + ("unsigned" if unsigned else "smoke-failed"),
                            {"error": str(error)[:500]})
            self.say(f"serving {group.kind}swap-refused {group.label}version={version} serving={was} "
                     f"error={str(error)[:200]!r}")
            return SwapResult(False, current, current, f"version {version} refused for {_whom(group)}: {error}",
                              tenant=group.tenant)
        # Recorded before the lease is given back (a registry call): a stop meanwhile loses nothing.
        previous, group.previous = group.previous, brought.replaced
        self._spawn(self._retire(group, previous))  # a probation still running is over: its old version goes
        group.refused.discard(version)  # an admin may force a version back in
        group.last_swap = time.monotonic()
        self.metrics.swaps.labels("ok").inc()
        self._set_version_gauges(group, current, version)
        self.say(f"serving {group.kind}swap {group.label}version={version} previous={was} reason={reason} "
                 f"mode={brought.mode} pause_s={brought.pause_s:.3f}")
        self._start_probation(group, brought.slot)
        return SwapResult(True, version, current, f"switched {_whom(group)} from {was} to {version} ({brought.mode})",
                          brought.pause_s, brought.mode, group.tenant)

    async def _promote_canary(self, group: RolloutGroup, version: str) -> BroughtIn | None:
        """The group's canary, when it already runs this version (loaded and smoke-tested: nothing to load). A canary
        may serve on the gate's "canary" signature alone (a candidate it deferred): to serve the whole group it must
        now carry the gate's "pass" (SignatureRefused otherwise)."""
        canary = group.canary
        if canary is None or canary.version != version:
            return None
        if self.registry is not None:
            folder = canary.adapter.path if canary.adapter is not None else canary.policy_dir  # the version's own
            try:
                await asyncio.to_thread(check_signed, self.registry, version, folder, self.config)
            except SignatureMismatch as error:
                self.metrics.signature_refusals.inc()
                raise SignatureRefused(f"version {version} refused: {error}") from error
        group.canary = None
        self.metrics.serving_version.labels(version, "canary").set(0)
        canary.reset_stats()  # judged as the group's version from now on, not on its canary share
        return BroughtIn(canary, group.route(canary), "canary")

    async def rollback(self, reason: str, detail: dict | None = None, tag: bool = True, tenant: str = "") -> SwapResult:
        """Serve the group's version replaced last again (for a tenant without one: the shared policy), through the
        smoke test of a forward swap where its weights are loaded again (serving/swap/groups.py)."""
        group = self.group(tenant)
        async with self._lock:
            bad = group.serving
            if bad is None or not group.can_roll_back():
                serving = group.version()
                message = "nothing is serving" if bad is None and not tenant else group.no_rollback()
                return SwapResult(False, serving, serving, message, tenant=tenant)
            if group.probation is not None and group.probation is not asyncio.current_task():
                group.probation.cancel()
            target = group.previous
            now = target.version if target is not None else ""
            async with self._update_lease(group, wait_s=self.config.lease_ttl_s):
                try:
                    brought = await group.bring_back(target, bad)
                except Exception as error:
                    log.error("rollback to version %s failed: %s", now, error)
                    serving = group.version()
                    return SwapResult(False, serving, serving, f"rollback to {now} failed: {error} "
                                      f"(version {serving} serves on)", tenant=tenant)
                group.previous = None
                group.refused.add(bad.version)
                group.last_swap = time.monotonic()
                self.metrics.rollbacks.labels(reason).inc()
                self._set_version_gauges(group, bad.version, now)
                self.say(f"serving {group.kind}rollback {group.label}version={now or group.nobody} from={bad.version} "
                         f"reason={reason} pause_s={brought.pause_s:.3f}")
                self._spawn(self._retire(group, bad))
        if tag:
            await self._tag(group, bad.version, reason, detail or {})
        return SwapResult(True, now, bad.version, f"rolled back {_whom(group)} from {bad.version} to "
                          f"{now or group.nobody}: {reason}", brought.pause_s, brought.mode, tenant)

    def _update_lease(self, group: RolloutGroup, wait_s: float):
        return update_lease(group.update_lease, self.config, wait_s, group.update_windows)

    # -- what the admin APIs do (gRPC PolicyAdmin and HTTP /admin/*, the same through both) -------------

    async def force_swap(self, version: str = "", tenant: str = "") -> SwapResult:
        """Swap a group (tenant's, or the shared one for "") to version (empty: the version its alias names now),
        whatever the minimum interval, even a version refused before. AdminRefused when there is nothing to swap
        from, or the tenant has no group here."""
        self._admin_group(tenant)
        if self.registry is None:
            raise AdminRefused("failed-precondition", "serving a fixed policy_dir: versions cannot be loaded from "
                               "the registry (unset serving.policy_dir to follow an alias)")
        if not version:
            alias = names.tenant_champion_alias(tenant) if tenant else self.config.alias
            version = await asyncio.to_thread(self.registry.alias_version, alias) or ""
            if not version:
                raise AdminRefused("not-found", f"alias {alias!r} is not set")
        return await self.swap_to(version, reason="force", tenant=tenant)

    async def admin_rollback(self, reason: str, tenant: str = "") -> SwapResult:
        """Roll a group back (tenant's, or the shared one for "") on an admin's word; the reason is tagged on the
        version rolled back. AdminRefused when the tenant has no group here."""
        self._admin_group(tenant)
        return await self.rollback("admin", {"message": reason[:ADMIN_REASON_MAX_CHARS]}, tenant=tenant)

    def _admin_group(self, tenant: str) -> RolloutGroup:
        """The group an admin names: never one made for the asking (a typo must not start following a new alias)."""
        if tenant not in self.groups:
            followed = sorted(t for t in self.groups if t)
            raise AdminRefused("not-found", f"tenant {tenant!r} has no group on this server (it follows "
                               f"{', '.join(map(repr, followed)) or 'no tenant'}): check the name")
        return self.groups[tenant]

    # -- probation and retiring ----------------------------------------------------------------------

    def _start_probation(self, group: RolloutGroup, slot: Slot | None) -> None:
        if group.probation is not None:
            group.probation.cancel()
        group.probation = asyncio.create_task(self._watch_probation(group, slot)) if slot is not None else None

    async def _watch_probation(self, group: RolloutGroup, slot: Slot) -> None:
        """Judge the group's new version for probation_s; roll back on a breach, else free what it no longer needs."""
        c = self.config
        deadline = time.monotonic() + c.probation_s  # slot's counts start at its first request (held ones too)
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if group.serving is not slot:
                return
            if slot.served >= c.probation_min_requests:
                error_rate = slot.failed / slot.served
                p99 = slot.p99_latency_s()
                if error_rate > c.max_error_rate or p99 > c.max_p99_latency_s:
                    kind = "error-rate" if error_rate > c.max_error_rate else "latency"
                    await self.rollback(kind, {"error_rate": error_rate, "p99_latency_s": p99,
                                               "requests": slot.served}, tenant=group.tenant)
                    return
        previous = group.previous
        if group.serving is slot and previous is not None and not group.keeps_after_probation(previous, slot):
            group.previous = None
            await self._retire(group, previous)

    async def _retire(self, group: RolloutGroup, slot: Slot | None) -> None:
        """Free a replaced version once its requests are done (or drain_timeout_s passed), unless it serves again."""
        if slot is None or slot in group.in_use():
            return
        if not await slot.drained(self.config.drain_timeout_s):
            log.warning("version %s still had %d requests after %.0f s; freeing it anyway",
                        slot.version, slot.in_flight, self.config.drain_timeout_s)
        if slot not in group.in_use():
            await group.free(slot)

    def _set_version_gauges(self, group: RolloutGroup, old: str, new: str) -> None:
        if old:
            self.metrics.serving_version.labels(old, group.role).set(0)
        if new:
            self.metrics.serving_version.labels(new, group.role).set(1)

    async def _tag(self, group: RolloutGroup, version: str, reason: str, detail: dict) -> None:
        """Tag a rolled-back version in the registry. The tag is what keeps the other replicas (and this one after a
        restart) off that version, so a shutdown or a cancelled probation does not cut it short: the write runs as
        a task of its own, shielded, and close() waits for it."""
        if self.registry is None:
            return
        task = asyncio.create_task(self._write_tag(group, version, reason, detail))
        self._tagging.add(task)
        task.add_done_callback(self._tagging.discard)
        await asyncio.shield(task)

    async def _write_tag(self, group: RolloutGroup, version: str, reason: str, detail: dict) -> None:
        detail = {"tenant": group.tenant, **detail} if group.tenant else detail
        try:
            await asyncio.to_thread(tag_rolled_back, self.registry, version, reason, detail)
        except Exception as error:  # the decision stands; the tag is best effort
            log.warning("could not tag version %s after %s: %s", version, reason, error)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- canary --------------------------------------------------------------------------------------

    async def set_canary(self, version: str | None, tenant: str = "") -> None:
        """Load version as the group's canary (or drop its canary when None or equal to what serves the group)."""
        group = self.group(tenant)
        current = group.canary
        if version in (None, "", group.version()) or version in group.refused:
            if current is not None:
                group.canary = None
                self.metrics.serving_version.labels(current.version, "canary").set(0)
                self.say(f"serving {group.kind}canary-stop {group.label}version={current.version}")
                self._spawn(self._retire(group, current))
            return
        if current is not None and current.version == version:
            return
        if await group.why_wait(version) is not None:  # an adapter of another base: not refused, not loaded yet
            return
        try:
            slot = await group.load_canary(version)
        except SwapError as error:
            group.refused.add(version)
            await self._tag(group, version, group.kind + "canary-smoke-failed", {"error": str(error)[:500]})
            self.say(f"serving {group.kind}canary-refused {group.label}version={version} error={str(error)[:200]!r}")
            return
        group.canary = slot
        self.metrics.serving_version.labels(version, "canary").set(1)
        self.say(f"serving {group.kind}canary {group.label}version={version} fraction={self.config.canary_fraction}")
        if current is not None:
            self.metrics.serving_version.labels(current.version, "canary").set(0)
            self._spawn(self._retire(group, current))

    # -- following the aliases -----------------------------------------------------------------------

    async def watch(self) -> None:
        """Look at the aliases every watch_interval_s, forever; act on what moved."""
        while True:
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # registry down: every group keeps what it has, try again
                log.warning("watcher: %s", error)
            await asyncio.sleep(self.config.watch_interval_s)

    async def check_once(self) -> list[SwapResult]:
        """One look at every followed alias (serving/swap/alias_watcher.py), then each group's decision: follow a fleet
        rollback, take the version its alias names when the interval and the fleet allow, follow its canary alias.
        Returns the swaps tried."""
        fleet = self.fleet
        if fleet is not None:
            await asyncio.to_thread(fleet.heartbeat)
        tried = []
        for seen in await self.watcher.look():
            group = self.group(seen.tenant)
            if fleet is not None:
                await self._follow_fleet_rollback(group)
            result = await self._follow(group, seen)
            if result is not None:
                tried.append(result)
            if seen.canary is not None:
                await self.set_canary(seen.canary or None, seen.tenant)
        return tried

    async def _follow(self, group: RolloutGroup, seen: Sighting) -> SwapResult | None:
        version = seen.version
        if not version or version == group.version() or version in group.refused:
            return None
        if time.monotonic() - group.last_swap < self.config.min_swap_interval_s or \
                not await self._fleet_allows(group, version):
            return None
        result = await self.swap_to(version, tenant=group.tenant)
        if result.ok and self.fleet is not None and group.version() == version:
            await asyncio.to_thread(self.fleet.mark_taken_by_canary, version)
        return result

    async def _fleet_allows(self, group: RolloutGroup, version: str) -> bool:
        """Whether the fleet lets this replica take version now (always, without a fleet)."""
        if self.fleet is None:
            return True
        self._cleared_ms[version] = int(time.time() * 1000)
        tags = await asyncio.to_thread(self.registry.tags, version)
        if rolled_back_at_ms(tags) is not None:
            group.refused.add(version)
            self.say(f"serving {group.kind}swap-refused {group.label}version={version} reason=rolled-back-by-fleet")
            return False
        if not await asyncio.to_thread(self.fleet.may_take, version, tags):
            if self._waiting_for.get(group.tenant) != version:
                self._waiting_for[group.tenant] = version
                self.say(f"serving {group.kind}swap-waiting {group.label}version={version} for=fleet-canary")
            return False
        return True

    async def _follow_fleet_rollback(self, group: RolloutGroup) -> None:
        """Roll the group back when another replica rolled back the version serving it here, after we took it."""
        serving = group.serving
        if serving is None or not group.can_roll_back():
            return
        tags = await asyncio.to_thread(self.registry.tags, serving.version)
        at_ms = rolled_back_at_ms(tags)
        taken_ms = self._cleared_ms.get(serving.version, serving.loaded_at_ms)  # ForceSwap: when loaded
        if at_ms is not None and at_ms >= taken_ms and group.serving is serving:
            await self.rollback("fleet", tag=False, tenant=group.tenant)

    async def close(self) -> None:
        if self._tagging:
            await asyncio.wait(set(self._tagging), timeout=TAG_DRAIN_S)
        tasks = [*self._background, *(g.probation for g in self.groups.values() if g.probation is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        slots = {*self.loader.loaded, *self.shared.in_use()}
        engines = {id(underlying(s.engine)): underlying(s.engine) for s in slots if s.engine is not None}
        self.loader.loaded.clear()
        for engine in engines.values():
            await engine.shutdown()
        if self.fleet is not None and self.config.fleet_canary:
            await asyncio.to_thread(self.fleet.canary_lease.release)


def _whom(group: RolloutGroup) -> str:
    return f"tenant {group.tenant}" if group.tenant else "the shared policy"
