"""LoRA adapter versions: put a new adapter of the served base into service with no pause and no failed request.

A registry version whose folder holds an adapter (liverl.contracts.adapter) names the base version it applies
to. When that base is what the champion's engine serves, the adapter is added to the running engine first
(vLLM's add_lora: its first request then pays no load) under a name and id of its own, smoke-tested, and the
router switches to a slot that runs its requests under it. Requests in flight finish on the adapter (or base)
they started on; nothing is held. The replaced adapter stays loaded, so a rollback is a switch back too.

Any other adapter version goes the full swap path with its base's weights folder as the slot's weights: the
engine loads the base in place and then the adapter (AdapterEngine.update_weights), or a second engine starts
on the base with the adapter.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.contracts.adapter import is_adapter_folder, read_manifest
from serving.engines.engine import Adapter, Engine
from serving.router import AdapterEngine, Router, Slot, underlying
from serving.swap.downloads import download_folder, download_version

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry

log = logging.getLogger("liverl.serving.adapter")

Smoke = Callable[[Slot], Awaitable[None]]


def is_adapter_version(policy_dir: Path) -> bool:
    """Whether a downloaded version folder is a LoRA adapter rather than full weights."""
    return is_adapter_folder(policy_dir)


def on_engine(engine: Engine, adapter: Adapter | None) -> Engine:
    """The engine a slot uses: the engine itself for full weights, or the engine under the adapter."""
    return engine if adapter is None else AdapterEngine(engine, adapter)


async def attach(engine: Engine, adapter: Adapter | None) -> Engine:
    """A freshly started engine, for a slot: with the adapter loaded when there is one. Shuts the engine down
    when the adapter does not load (nothing else uses it yet)."""
    if adapter is None:
        return engine
    try:
        await engine.load_adapter(adapter)
    except BaseException:
        await engine.shutdown()
        raise
    return on_engine(engine, adapter)


class AdapterSwaps:
    """Names, loads, switches to and frees adapter versions for one Rollout (serving/swap/rollout.py)."""

    def __init__(self, registry: ModelRegistry | None, versions_dir: Path):
        self.registry = registry
        self.versions_dir = Path(versions_dir)
        self._ids = itertools.count(1)  # vLLM lora ids: >= 1, a new one for every adapter loaded

    def describe(self, fetched: Slot) -> Adapter:
        """The adapter of a fetched adapter version, with a name and id no earlier load used."""
        manifest = read_manifest(fetched.policy_dir)
        lora_id = next(self._ids)
        return Adapter(name=f"liverl-v{fetched.version}-{lora_id}", lora_id=lora_id, path=fetched.policy_dir,
                       version=fetched.version, base_version=manifest.base_version)

    async def prepare(self, fetched: Slot, champion: Slot | None) -> Slot:
        """The slot of a fetched adapter version (no engine yet): its weights folder is the champion's when the
        champion serves the adapter's base, else the base version downloaded. Raises ValueError for a bad
        manifest and the registry's error for a base that cannot be downloaded."""
        adapter = self.describe(fetched)
        if champion is not None and champion.weights_version == adapter.base_version:
            base_dir = champion.policy_dir
        else:
            if self.registry is None:
                raise ValueError(f"adapter version {fetched.version} applies to base version {adapter.base_version}, "
                                 "which is not serving here and no registry is configured to fetch it")
            base_dir, _source = await asyncio.to_thread(download_version, self.registry, adapter.base_version,
                                                        self.versions_dir)
        return Slot(fetched.version, None, fetched.tokenizer, Path(base_dir), fetched.source_uri, adapter=adapter)

    @staticmethod
    def fits_running_engine(slot: Slot, champion: Slot | None) -> bool:
        """Whether slot's adapter can join the champion's engine as it is: same base weights, adapter-capable."""
        return (slot.adapter is not None and champion is not None and champion.policy_dir == slot.policy_dir
                and champion.weights_version == slot.adapter.base_version
                and hasattr(underlying(champion.engine), "load_adapter"))

    async def switch_to(self, slot: Slot, router: Router, smoke: Smoke) -> tuple[Slot | None, dict]:
        """Load slot's adapter into the champion's engine, smoke it, switch: (the replaced champion, timings).
        Raises (the champion untouched, the adapter unloaded) when the adapter does not load or fails its smoke."""
        engine = underlying(router.champion.engine)
        started = time.perf_counter()
        await engine.load_adapter(slot.adapter)
        loaded = time.perf_counter()
        slot.engine = on_engine(engine, slot.adapter)
        try:
            await smoke(slot)
        except BaseException:
            await self._unload(engine, slot.adapter)
            raise
        smoked = time.perf_counter()
        replaced = router.switch(slot)
        log.info("adapter %s (version %s on base %s) added in %.3f s, smoke-tested in %.3f s; switched with no pause",
                 slot.adapter.name, slot.version, slot.adapter.base_version, loaded - started, smoked - loaded)
        return replaced, {"load_s": loaded - started, "smoke_s": smoked - loaded}

    @staticmethod
    def shares_weights(target: Slot, serving: Slot) -> bool:
        """Whether target runs on the very weights serving runs on (one engine, one weights folder), so going
        back to it is a switch, with no weight update."""
        return underlying(target.engine) is underlying(serving.engine) and target.policy_dir == serving.policy_dir

    async def ready(self, slot: Slot) -> None:
        """Load slot's adapter again when its engine dropped it (a weight update since), before it takes traffic."""
        engine = underlying(slot.engine)
        if slot.adapter is not None and not engine.has_adapter(slot.adapter):
            await engine.load_adapter(slot.adapter)

    async def release(self, slot: Slot, in_use: list[Slot], engine_up: bool) -> None:
        """A retired adapter version: unload it from its engine (when that stays up) and delete its download."""
        if slot.adapter is None or any(s.adapter == slot.adapter for s in in_use):
            return
        if engine_up:
            await self._unload(underlying(slot.engine), slot.adapter)
        folder = download_folder(self.versions_dir, slot.adapter.path)
        if folder is not None:
            await asyncio.to_thread(shutil.rmtree, folder, True)

    @staticmethod
    async def _unload(engine: Engine, adapter: Adapter) -> None:
        try:
            await engine.unload_adapter(adapter)
        except Exception as error:  # it only costs a cache slot; the version is not served any more
            log.warning("could not unload adapter %s: %s", adapter.name, error)
