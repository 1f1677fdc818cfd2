"""The fleet's update lease around one swap or rollback (serving/swap/fleet.py): at most serving.max_unavailable
replicas update at once. Always granted without a fleet; renewed while held; each held window is recorded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from liverl.config.serving import ServingConfig
from liverl.io.lease import RegistryLease

log = logging.getLogger("liverl.serving.swap")


@contextlib.asynccontextmanager
async def update_lease(lease: RegistryLease | None, config: ServingConfig, wait_s: float,
                       windows: list[tuple[float, float]]) -> AsyncIterator[bool]:
    """Yields whether the update may go ahead. wait_s == 0 (swaps): one try, False when others hold the lease.
    wait_s > 0 (rollbacks): wait that long for it, then go ahead without it (logged). Appends the (start, end)
    wall times of the update to windows."""
    held = lease is None
    deadline = time.monotonic() + wait_s
    while not held:
        try:
            held = await asyncio.to_thread(lease.try_acquire)
        except Exception as error:  # registry down
            log.warning("fleet update lease: %s", error)
        if held or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(1.0, config.watch_interval_s))
    if not held and wait_s > 0:
        log.warning("no fleet update lease after %.0f s: rolling back without it", wait_s)
    if not held and wait_s <= 0:
        yield False
        return
    started = time.time()
    renewing = asyncio.create_task(_renew(lease, config.lease_ttl_s)) if lease is not None and held else None
    try:
        yield True
    finally:
        windows.append((started, time.time()))
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            await asyncio.to_thread(lease.release)


async def _renew(lease: RegistryLease, ttl_s: float) -> None:
    while True:
        await asyncio.sleep(ttl_s / 3)
        try:
            await asyncio.to_thread(lease.renew)
        except Exception as error:
            log.warning("renewing the fleet update lease: %s", error)
