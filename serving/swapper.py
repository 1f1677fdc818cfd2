"""Hot-swap: follow the registry alias, load a new version beside the serving one, smoke it, switch.

A switch is one assignment on the event loop (Router.switch): requests that started before it keep
their lease on the old version to their last token, so nothing fails and every record names the
version that really produced its tokens. The replaced version stays loaded through a probation
window; if the new one's error rate or p99 latency breaks a threshold meanwhile, serving switches
back, tags the registry version and refuses it until the alias moves elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from serving.engine import Sampling
from serving.engine_factory import make_engine
from serving.metrics import ServingMetrics
from serving.router import Router, Slot

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from serving.registry import Registry

log = logging.getLogger("liverl.serving.swap")


class SwapError(RuntimeError):
    pass


@dataclass
class SwapResult:
    ok: bool
    version: str
    previous: str
    message: str


class HotSwapper:
    def __init__(self, config: ServingConfig, router: Router, metrics: ServingMetrics, registry: Registry | None,
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
        self._loaded: set[Slot] = set()  # every slot whose engine is up, so close() frees them all

    # -- loading -------------------------------------------------------------------------------------

    async def load(self, version: str, policy_dir: Path | None = None) -> Slot:
        """Download (unless a folder is given), start an engine, smoke-test it. Raises SwapError."""
        source = str(policy_dir) if policy_dir else ""
        try:
            if policy_dir is None:
                policy_dir, source = await asyncio.to_thread(self.registry.download, version, self.versions_dir)
            tokenizer = await asyncio.to_thread(_load_tokenizer, policy_dir)
            engine = make_engine(self.config.engine, policy_dir, self.config)
            await engine.start()
        except Exception as error:
            raise SwapError(f"version {version} failed to load: {error}") from error
        slot = Slot(version, engine, tokenizer, Path(policy_dir), source)
        try:
            await self._smoke(slot)
        except Exception as error:
            await engine.shutdown()
            raise SwapError(f"version {version} failed its smoke generation: {error}") from error
        self._loaded.add(slot)
        return slot

    async def _smoke(self, slot: Slot) -> None:
        ids = list(slot.tokenizer(self.config.smoke_prompt, add_special_tokens=True)["input_ids"]) or [0]
        sampling = Sampling(temperature=0.0, max_tokens=self.config.smoke_max_tokens)
        tokens, logprobs = [], []
        async for delta in slot.engine.generate(ids, sampling, f"smoke-{slot.version}-{time.time_ns()}"):
            tokens += delta.token_ids
            logprobs += delta.logprobs
        if not tokens or len(tokens) != len(logprobs):
            raise SwapError(f"smoke generation returned {len(tokens)} tokens and {len(logprobs)} logprobs")
        if not all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs):
            raise SwapError(f"smoke generation returned invalid logprobs {logprobs}")

    # -- switching -----------------------------------------------------------------------------------

    async def start_with(self, version: str, policy_dir: Path | None = None) -> Slot:
        slot = await self.load(version, policy_dir)
        self.router.switch(slot)  # the first load is not a swap: the minimum interval starts at the first switch
        self.metrics.serving_version.labels(version, "champion").set(1)
        return slot

    async def swap_to(self, version: str, reason: str = "alias") -> SwapResult:
        """Load version beside the champion and switch to it. Never raises; the result says what happened."""
        async with self._lock:
            current = self.router.champion.version if self.router.champion else ""
            if version == current:
                return SwapResult(True, version, current, f"version {version} is already serving")
            self.say(f"serving swap-start version={version} previous={current} reason={reason}")
            try:
                slot = self._promote_canary(version) or await self.load(version)
            except SwapError as error:
                self.metrics.swaps.labels("smoke_failed").inc()
                self.refused.add(version)
                await self._tag(version, "smoke-failed", {"error": str(error)[:500]})
                self.say(f"serving swap-refused version={version} serving={current} error={str(error)[:200]!r}")
                return SwapResult(False, current, current, str(error))
            self._spawn(self._retire(self.previous))  # a probation still running is over: its old version goes
            self.previous = self.router.switch(slot)
            self.refused.discard(version)  # an admin may force a version back in
            self.last_swap = time.monotonic()
            self.metrics.swaps.labels("ok").inc()
            self._set_version_gauges(current, version)
            self.say(f"serving swap version={version} previous={current} reason={reason}")
            self._start_probation(slot)
            return SwapResult(True, version, current, f"switched from {current} to {version}")

    async def rollback(self, reason: str, detail: dict | None = None) -> SwapResult:
        """Switch back to the version replaced last, which stays loaded through the probation window.
        After that window it is gone: ForceSwap to an explicit version instead."""
        async with self._lock:
            bad = self.router.champion
            if bad is None:
                return SwapResult(False, "", "", "nothing is serving")
            target = self.previous
            if target is None:
                return SwapResult(False, bad.version, bad.version,
                                  "no previous version is known to roll back to: use ForceSwap with a version")
            self.previous = None
            self.router.switch(target)
            self.refused.add(bad.version)
            self.last_swap = time.monotonic()
            self.metrics.rollbacks.labels(reason).inc()
            self._set_version_gauges(bad.version, target.version)
            self.say(f"serving rollback version={target.version} from={bad.version} reason={reason}")
            if self._probation is not None and self._probation is not asyncio.current_task():
                self._probation.cancel()
            self._spawn(self._retire(bad))
            await self._tag(bad.version, reason, detail or {})
            return SwapResult(True, target.version, bad.version, f"rolled back from {bad.version} to "
                                                                    f"{target.version}: {reason}")

    def _promote_canary(self, version: str) -> Slot | None:
        """The canary slot when it already runs this version (loaded and smoke-tested: no second engine)."""
        canary = self.router.canary
        if canary is None or canary.version != version:
            return None
        self.router.canary = None
        self.metrics.serving_version.labels(version, "canary").set(0)
        return canary

    def _start_probation(self, slot: Slot) -> None:
        if self._probation is not None:
            self._probation.cancel()
        self._probation = asyncio.create_task(self._watch_probation(slot))

    async def _watch_probation(self, slot: Slot) -> None:
        """Judge the new champion for probation_s; roll back on a breach, else free the old version."""
        c = self.config
        deadline = time.monotonic() + c.probation_s
        slot.reset_stats()
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
        if self.router.champion is slot and self.previous is not None:
            old, self.previous = self.previous, None
            await self._retire(old)

    async def _retire(self, slot: Slot | None) -> None:
        """Shut a replaced version down once its requests are done (or drain_timeout_s passed)."""
        if slot is None or slot is self.router.champion or slot is self.router.canary:
            return
        if not await slot.drained(self.config.drain_timeout_s):
            log.warning("version %s still had %d requests after %.0f s; shutting down anyway",
                        slot.version, slot.in_flight, self.config.drain_timeout_s)
        self._loaded.discard(slot)
        await slot.engine.shutdown()

    def _set_version_gauges(self, old: str, new: str) -> None:
        if old:
            self.metrics.serving_version.labels(old, "champion").set(0)
        self.metrics.serving_version.labels(new, "champion").set(1)

    async def _tag(self, version: str, reason: str, detail: dict) -> None:
        if self.registry is None:
            return
        try:
            await asyncio.to_thread(self.registry.tag_rollback, version, reason, detail)
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
            slot = await self.load(version)
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

    # -- the watcher ---------------------------------------------------------------------------------

    async def watch(self) -> None:
        """Poll the alias (and the canary alias) forever; swap when it moved and the interval allows."""
        c = self.config
        while True:
            await asyncio.sleep(c.watch_interval_s)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # registry down: keep serving what we have, try again
                log.warning("watcher: %s", error)

    async def check_once(self) -> None:
        c = self.config
        version = await asyncio.to_thread(self.registry.alias_version, c.alias)
        champion = self.router.champion.version if self.router.champion else ""
        if version and version != champion and version not in self.refused:
            if time.monotonic() - self.last_swap >= c.min_swap_interval_s:
                await self.swap_to(version)
        if c.canary_alias and c.canary_fraction > 0:
            await self.set_canary(await asyncio.to_thread(self.registry.alias_version, c.canary_alias))

    async def close(self) -> None:
        for task in [self._probation, *self._background]:
            if task is not None:
                task.cancel()
        for slot in list(self._loaded):
            self._loaded.discard(slot)
            await slot.engine.shutdown()


def _load_tokenizer(policy_dir: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(policy_dir)
