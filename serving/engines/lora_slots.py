"""Which tenant adapters one engine keeps loaded: at most `capacity`, the least recently used idle one removed
when a cold one is needed.

vLLM keeps up to max_cpu_loras adapters and, past that, drops its oldest by itself, whether a request still
names it or not. So serving bounds the tenants' adapters itself, below that cap: an adapter is loaded (add_lora)
when a request needs it and is not loaded, and the one unused longest is removed (remove_lora) first. An adapter
with requests in flight is never removed; when every loaded one is busy, a cold request waits for one to finish.
A weight update drops every adapter of the engine; `has_adapter` says so, and the next request loads its own again.
A tenant version's engine (TenantEngine) runs each request under its adapter inside these places.
Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path

from serving.engines.engine import Adapter, Delta, Engine, Sampling
from serving.router import AdapterEngine

log = logging.getLogger("liverl.serving.lora_slots")


class LoraSlots:
    def __init__(self, engine: Engine, capacity: int):
        if capacity < 1:
            raise ValueError(f"LoraSlots capacity {capacity}: keep at least one adapter loaded")
        self.engine = engine
        self.capacity = capacity
        self._recent: OrderedDict[int, Adapter] = OrderedDict()  # lora id -> adapter, least recently used first
        self._busy: Counter[int] = Counter()  # lora id -> requests running under it
        self._loading = asyncio.Lock()  # one load or removal at a time: the count stays within capacity
        self._freed = asyncio.Event()  # set whenever an adapter's last request ends
        self.loads = 0
        self.evictions = 0

    @contextlib.asynccontextmanager
    async def use(self, adapter: Adapter) -> AsyncIterator[None]:
        """Run one request under adapter: loaded first when cold, never removed while inside."""
        await self.acquire(adapter)
        try:
            yield
        finally:
            self.release(adapter)

    async def acquire(self, adapter: Adapter) -> None:
        """Mark adapter busy and make sure it is loaded (waiting for a busy one to free a place when all are)."""
        self._busy[adapter.lora_id] += 1
        self._recent[adapter.lora_id] = adapter
        self._recent.move_to_end(adapter.lora_id)
        try:
            if not self.engine.has_adapter(adapter):
                async with self._loading:
                    await self._load(adapter)
        except BaseException:
            self.release(adapter)
            if adapter.lora_id not in self._busy and not self.engine.has_adapter(adapter):
                self._recent.pop(adapter.lora_id, None)  # it never loaded: nothing to track
            raise

    def release(self, adapter: Adapter) -> None:
        self._busy[adapter.lora_id] -= 1
        if self._busy[adapter.lora_id] <= 0:
            del self._busy[adapter.lora_id]
            self._freed.set()

    async def forget(self, adapter: Adapter) -> None:
        """A tenant version retired and drained: remove its adapter and stop tracking it."""
        if adapter.lora_id in self._busy:
            log.warning("adapter %s retired with %d requests running: left loaded until evicted", adapter.name,
                        self._busy[adapter.lora_id])
            return
        self._recent.pop(adapter.lora_id, None)
        async with self._loading:
            try:
                await self.engine.unload_adapter(adapter)
            except Exception as error:  # it only costs a cache place until the engine's own eviction
                log.warning("could not remove retired adapter %s: %s", adapter.name, error)

    def loaded(self) -> list[Adapter]:
        """The tracked adapters loaded now, least recently used first."""
        return [a for a in self._recent.values() if self.engine.has_adapter(a)]

    def busy(self, adapter: Adapter) -> int:
        return self._busy.get(adapter.lora_id, 0)

    async def _load(self, adapter: Adapter) -> None:
        while not self.engine.has_adapter(adapter):
            loaded = self.loaded()
            if len(loaded) < self.capacity:
                await self.engine.load_adapter(adapter)
                self.loads += 1
                return
            idle = next((a for a in loaded if a.lora_id not in self._busy), None)
            if idle is not None:
                await self.engine.unload_adapter(idle)  # raises: this request fails, nothing else changes
                self.evictions += 1
                continue
            self._freed.clear()  # every loaded adapter serves a request: wait until one ends
            await self._freed.wait()


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
