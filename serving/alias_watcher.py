"""Following the registry: poll the alias (and the canary alias) and ask the swapper to put each new version into
service, when the minimum interval and the fleet allow (serving/fleet.py: canary first, a version another replica
rolled back is refused, and a replica serving it rolls back too)."""

from __future__ import annotations

import asyncio
import logging
import time

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from liverl.config.serving import ServingConfig
from serving.fleet import Fleet, rolled_back_at_ms
from serving.router import Router, Slot
from serving.swap_result import SwapResult

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry

log = logging.getLogger("liverl.serving.swap")


class Swapper(Protocol):
    """What the watcher reads and asks of the swapper (serving/swapper.py, HotSwapper)."""

    config: ServingConfig
    router: Router
    registry: ModelRegistry
    fleet: Fleet | None
    previous: Slot | None
    refused: set[str]
    last_swap: float
    say: Callable[[str], None]

    async def swap_to(self, version: str, reason: str = "alias") -> SwapResult: ...

    async def rollback(self, reason: str, detail: dict | None = None, tag: bool = True) -> SwapResult: ...

    async def set_canary(self, version: str | None) -> None: ...


class AliasWatcher:
    def __init__(self, swapper: Swapper):
        self.swapper = swapper
        self._waiting_for = ""  # the version this replica waits to take after the fleet's canary
        self._cleared_ms: dict[str, int] = {}  # version -> when the fleet's tags last let this replica take it

    async def watch(self) -> None:
        """Poll the alias forever; swap when it moved and the interval allows."""
        while True:
            await asyncio.sleep(self.swapper.config.watch_interval_s)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # registry down: keep serving what we have, try again
                log.warning("watcher: %s", error)

    async def check_once(self) -> None:
        s = self.swapper
        c, fleet, registry = s.config, s.fleet, s.registry
        if fleet is not None:
            await asyncio.to_thread(fleet.heartbeat)
            await self._follow_fleet_rollback()
        version = await asyncio.to_thread(registry.alias_version, c.alias)
        champion = s.router.champion.version if s.router.champion else ""
        if version and version != champion and version not in s.refused:
            if time.monotonic() - s.last_swap >= c.min_swap_interval_s and await self._fleet_allows(version):
                result = await s.swap_to(version)
                if result.ok and fleet is not None and s.router.champion.version == version:
                    await asyncio.to_thread(fleet.mark_taken_by_canary, version)
        if c.canary_alias and c.canary_fraction > 0:
            await s.set_canary(await asyncio.to_thread(registry.alias_version, c.canary_alias))

    async def _fleet_allows(self, version: str) -> bool:
        """Whether the fleet lets this replica take version now (always, without a fleet)."""
        s = self.swapper
        if s.fleet is None:
            return True
        self._cleared_ms[version] = int(time.time() * 1000)
        tags = await asyncio.to_thread(s.registry.tags, version)
        if rolled_back_at_ms(tags) is not None:
            s.refused.add(version)
            s.say(f"serving swap-refused version={version} reason=rolled-back-by-fleet")
            return False
        if not await asyncio.to_thread(s.fleet.may_take, version, tags):
            if self._waiting_for != version:
                self._waiting_for = version
                s.say(f"serving swap-waiting version={version} for=fleet-canary")
            return False
        return True

    async def _follow_fleet_rollback(self) -> None:
        """Roll back in place when another replica rolled back the version serving here, after we took it."""
        s = self.swapper
        champion = s.router.champion
        if champion is None or s.previous is None:
            return
        tags = await asyncio.to_thread(s.registry.tags, champion.version)
        at_ms = rolled_back_at_ms(tags)
        taken_ms = self._cleared_ms.get(champion.version, champion.loaded_at_ms)  # ForceSwap: when loaded
        if at_ms is not None and at_ms >= taken_ms and s.router.champion is champion:
            await s.rollback("fleet", tag=False)
