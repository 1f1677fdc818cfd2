"""Hot-swap: follow the registry alias and put each new version into service without a failed request.

In place (serving.swap_mode = "in_place", the default): the router holds new requests (labelled with
the new version, waiting), the old version's requests finish on the old weights, the serving engine
loads the new weights (Engine.update_weights), a short smoke generation and the trainer's weight probe
(serving/weight_check.py) check them, and the held requests run. One copy of the model, a pause of about
the load time. When the update raises, serving puts the old weights back and falls back to loading the
new version on a second engine (logged).
Two engines (swap_mode = "two_engine"): a second engine is started, smoke-tested and switched to with
one assignment (Router.switch); requests that started before keep the old one to their last token.

A LoRA adapter of the base the engine serves is added to the running engine and switched to with no pause
(serving/adapter_swap.py); any other adapter version takes one of the paths above on its base's weights.

Either way every record names the version that really produced its tokens. Through a probation window
the new version's error rate and p99 latency are watched; a breach rolls back (in place: the previous
version's folder, kept on disk, is loaded again), tags the registry version and refuses it until the
alias moves elsewhere. Replicas following one alias coordinate through the registry (serving/fleet.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from liverl.io.signing import SignatureMismatch
from serving.adapter_swap import AdapterSwaps, attach, is_adapter_version, on_engine
from serving.engine import Sampling
from serving.engine_factory import make_engine
from serving.fleet import Fleet, rolled_back_at_ms
from serving.metrics import ServingMetrics
from serving.router import Hold, Router, Slot, underlying
from serving.signature_check import check_signed
from serving.weight_check import verify_weights

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from serving.registry import Registry

log = logging.getLogger("liverl.serving.swap")


class SwapError(RuntimeError):
    pass


class SignatureRefused(SwapError):
    """A registry version whose files or verdict do not carry the trainer's signature (serving/signature_check.py)."""


@dataclass
class SwapResult:
    ok: bool
    version: str
    previous: str
    message: str
    pause_s: float = 0.0  # how long new requests were held (in place); 0 for a switch between engines
    mode: str = ""  # "in_place" | "two_engine" | "adapter" | "canary" (promoted) | "" (nothing changed)


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
        self.fleet = Fleet(config, registry) if registry is not None else None
        self.adapters = AdapterSwaps(registry, versions_dir)
        self.update_windows: list[tuple[float, float]] = []  # (start, end) wall times of each update's lease
        self._waiting_for = ""  # the version this replica waits to take after the fleet's canary
        self._cleared_ms: dict[str, int] = {}  # version -> when the fleet's tags last let this replica take it
        self._replaced: Slot | None = None  # the champion a swap in progress replaced

    # -- loading -------------------------------------------------------------------------------------

    async def fetch(self, version: str, policy_dir: Path | None = None) -> Slot:
        """Download (unless a folder is given) and read the tokenizer: a slot with no engine yet."""
        source = str(policy_dir) if policy_dir else ""
        downloaded = policy_dir is None
        try:
            if downloaded:
                policy_dir, source = await asyncio.to_thread(self.registry.download, version, self.versions_dir)
                await asyncio.to_thread(check_signed, self.registry, version, policy_dir, self.config)
            tokenizer = await asyncio.to_thread(_load_tokenizer, policy_dir)
            slot = Slot(version, None, tokenizer, Path(policy_dir), source)
            if is_adapter_version(slot.policy_dir):  # its weights folder becomes its base's
                champion = self.router.champion
                slot = await self.adapters.prepare(slot, champion)
                if downloaded and (champion is None or slot.policy_dir != champion.policy_dir):  # a base fetched now
                    await asyncio.to_thread(check_signed, self.registry, slot.adapter.base_version, slot.policy_dir,
                                            self.config)
        except SignatureMismatch as error:
            self.metrics.signature_refusals.inc()
            raise SignatureRefused(f"version {version} refused: {error}") from error
        except Exception as error:
            raise SwapError(f"version {version} failed to load: {error}") from error
        return slot

    async def load(self, version: str, policy_dir: Path | None = None, fetched: Slot | None = None) -> Slot:
        """Fetch the version (unless given), start an engine of its own, smoke-test it. Raises SwapError."""
        slot = fetched or await self.fetch(version, policy_dir)
        try:
            slot.engine = make_engine(self.config.engine, slot.policy_dir, self.config)
            await slot.engine.start()
            slot.engine = await attach(slot.engine, slot.adapter)
        except Exception as error:
            raise SwapError(f"version {version} failed to load: {error}") from error
        try:
            await self._smoke(slot)
        except Exception as error:
            await slot.engine.shutdown()
            raise SwapError(f"version {version} failed its smoke generation: {error}") from error
        self._loaded.add(slot)
        return slot

    async def _smoke(self, slot: Slot, engine=None) -> None:
        engine = engine or slot.engine
        ids = list(slot.tokenizer(self.config.smoke_prompt, add_special_tokens=True)["input_ids"]) or [0]
        sampling = Sampling(temperature=0.0, max_tokens=self.config.smoke_max_tokens)
        tokens, logprobs = [], []
        async for delta in engine.generate(ids, sampling, f"smoke-{slot.version}-{time.time_ns()}"):
            tokens += delta.token_ids
            logprobs += delta.logprobs
        if not tokens or len(tokens) != len(logprobs):
            raise SwapError(f"smoke generation returned {len(tokens)} tokens and {len(logprobs)} logprobs")
        if not all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs):
            raise SwapError(f"smoke generation returned invalid logprobs {logprobs}")
        # Before any traffic: the engine must reproduce the trainer's weight probe, else the caller rolls back. An
        # adapter version's probe sits in its adapter folder (measured on base + adapter), not in its base's.
        probed = slot.adapter.path if slot.adapter is not None else slot.policy_dir
        await verify_weights(engine, probed, slot.version, self.config, self.metrics, self.say)

    # -- switching -----------------------------------------------------------------------------------

    async def start_with(self, version: str, policy_dir: Path | None = None) -> Slot:
        slot = await self.load(version, policy_dir)
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
                    slot, mode, pause_s = await self._bring_in(version)
                except SwapError as error:
                    unsigned = isinstance(error, SignatureRefused)
                    self.metrics.swaps.labels("unsigned" if unsigned else "smoke_failed").inc()
                    self.refused.add(version)
                    await self._tag(version, "unsigned" if unsigned else "smoke-failed", {"error": str(error)[:500]})
                    self.say(f"serving swap-refused version={version} serving={current} error={str(error)[:200]!r}")
                    return SwapResult(False, current, current, str(error))
            previous = self.previous
            self.previous = self._replaced
            self._replaced = None
            self._spawn(self._retire(previous))  # a probation still running is over: its old version goes
            self.refused.discard(version)  # an admin may force a version back in
            self.last_swap = time.monotonic()
            self.metrics.swaps.labels("ok").inc()
            self._set_version_gauges(current, version)
            self.say(f"serving swap version={version} previous={current} reason={reason} mode={mode} "
                     f"pause_s={pause_s:.3f}")
            self._start_probation(slot)
            return SwapResult(True, version, current, f"switched from {current} to {version} ({mode})", pause_s,
                              mode)

    async def _bring_in(self, version: str) -> tuple[Slot, str, float]:
        """Make version the champion: (its slot, how, how long requests were held). Sets self._replaced."""
        canary = self._promote_canary(version)
        if canary is not None:
            self._replaced = self.router.switch(canary)
            return canary, "canary", 0.0
        fetched = await self.fetch(version)
        champion = self.router.champion
        if self.adapters.fits_running_engine(fetched, champion):
            try:
                self._replaced, _timings = await self.adapters.switch_to(fetched, self.router, self._smoke)
            except Exception as error:
                raise SwapError(f"adapter version {version} failed to load or its smoke generation: {error}") from error
            return fetched, "adapter", 0.0
        engine = underlying(champion.engine)
        if self.config.swap_mode == "in_place" and hasattr(engine, "update_weights"):
            slot = Slot(version, on_engine(engine, fetched.adapter), fetched.tokenizer, fetched.policy_dir,
                        fetched.source_uri, adapter=fetched.adapter)
            hold = self.router.hold(slot)
            try:
                try:
                    pause_s = await self._update_in_place(hold)
                    self._replaced = hold.previous
                    return slot, "in_place", pause_s
                except _InPlaceFailed as failure:  # the old weights are back; the held requests still wait
                    log.warning("in-place update to version %s failed (%s); falling back to a second engine",
                                version, failure)
                    self.say(f"serving swap-fallback version={version} mode=two_engine "
                             f"error={str(failure)[:200]!r}")
                    loaded = await self.load(version, fetched=Slot(version, None, slot.tokenizer, slot.policy_dir,
                                                                   slot.source_uri, adapter=slot.adapter))
                    self._loaded.discard(loaded)
                    self._loaded.add(slot)
                    pause_s = hold.release_to(loaded.engine)
                    self._replaced = hold.previous
                    self.metrics.swap_pause.observe(pause_s)
                    return slot, "two_engine", pause_s
            except BaseException as error:  # held requests fail (they were labelled version), new ones go back
                hold.fail(error if isinstance(error, SwapError) else SwapError(f"version {version}: {error}"))
                raise
        slot = await self.load(version, fetched=fetched)
        self._replaced = self.router.switch(slot)
        return slot, "two_engine", 0.0

    async def _update_in_place(self, hold: Hold) -> float:
        """Drain the old version, load the new weights, smoke them, release the held requests; returns
        how long they were held. _InPlaceFailed when the load raised (old weights restored, still held);
        SwapError when the smoke failed (old weights restored and serving, held requests failed)."""
        slot, old = hold.slot, hold.previous
        if not await old.drained(self.config.drain_timeout_s):
            log.warning("version %s still had %d requests after %.0f s; updating anyway (the engine lets "
                        "them finish first)", old.version, old.in_flight, self.config.drain_timeout_s)
        try:
            report = await hold.engine.update_weights(slot.policy_dir, slot.version)
        except Exception as error:
            await self._restore(hold.engine, old)
            raise _InPlaceFailed(f"{type(error).__name__}: {error}") from error
        try:
            await self._smoke(slot, hold.engine)
        except Exception as error:
            await self._restore(hold.engine, old)
            failure = SwapError(f"version {slot.version} failed its smoke generation: {error}")
            hold.fail(failure)
            raise failure from error
        pause_s = hold.release()
        self.metrics.swap_pause.observe(pause_s)
        log.info("version %s loaded in place in %.3f s (requests held %.3f s, %s shared heads re-packed)",
                 slot.version, report.get("seconds", 0.0), pause_s, report.get("repacked_heads", 0))
        return pause_s

    async def _restore(self, engine, old: Slot) -> None:
        """Put the old version's weights (and adapter) back (its folders stay on disk for this)."""
        try:
            await on_engine(underlying(engine), old.adapter).update_weights(old.policy_dir, old.version)
        except Exception as error:  # nothing left to fall back to on this engine: say so loudly
            log.error("could not restore version %s in place after a failed update: %s", old.version, error)
            raise SwapError(f"restoring version {old.version} failed too ({error}): restart this replica") from error

    async def rollback(self, reason: str, detail: dict | None = None, tag: bool = True) -> SwapResult:
        """Serve the version replaced last again: in place from its folder (kept while it is the previous
        version), or by switching back to its engine (two engines: loaded through the probation window only;
        after it, ForceSwap to an explicit version instead)."""
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
                pause_s = 0.0
                if self.adapters.shares_weights(target, bad):  # adapters of one base: back to the one still loaded
                    try:
                        await self.adapters.ready(target)
                    except Exception as error:
                        return SwapResult(False, bad.version, bad.version, f"rollback to {target.version} failed: "
                                          f"its adapter did not load again ({error})")
                    self.router.switch(target)
                elif underlying(target.engine) is underlying(bad.engine):
                    hold = self.router.hold(target)
                    await bad.drained(self.config.drain_timeout_s)
                    try:
                        await hold.engine.update_weights(target.policy_dir, target.version)
                    except Exception as error:
                        hold.fail(SwapError(f"rollback to version {target.version} failed: {error}"))
                        log.error("rollback to version %s failed: %s", target.version, error)
                        return SwapResult(False, bad.version, bad.version, f"rollback to {target.version} failed: "
                                          f"{error}: restart this replica")
                    pause_s = hold.release()
                else:
                    self.router.switch(target)
            self.previous = None
            self.refused.add(bad.version)
            self.last_swap = time.monotonic()
            self.metrics.rollbacks.labels(reason).inc()
            self._set_version_gauges(bad.version, target.version)
            self.say(f"serving rollback version={target.version} from={bad.version} reason={reason} "
                     f"pause_s={pause_s:.3f}")
            self._spawn(self._retire(bad))
            if tag:
                await self._tag(bad.version, reason, detail or {})
            return SwapResult(True, target.version, bad.version, f"rolled back from {bad.version} to "
                                                                    f"{target.version}: {reason}", pause_s)

    @contextlib.asynccontextmanager
    async def _update_lease(self, wait_s: float) -> AsyncIterator[bool]:
        """The fleet's update lease (always granted without a fleet), renewed while held; the window is
        recorded. wait_s > 0 (rollbacks): wait that long for it, then go ahead without it (logged)."""
        lease = self.fleet.update_lease if self.fleet is not None else None
        held = lease is None
        deadline = time.monotonic() + wait_s
        while not held:
            try:
                held = await asyncio.to_thread(lease.try_acquire)
            except Exception as error:  # registry down
                log.warning("fleet update lease: %s", error)
            if held or time.monotonic() >= deadline:
                break
            await asyncio.sleep(min(1.0, self.config.watch_interval_s))
        if not held and wait_s > 0:
            log.warning("no fleet update lease after %.0f s: rolling back without it", wait_s)
        if not held and wait_s <= 0:
            yield False
            return
        started = time.time()
        renewing = asyncio.create_task(self._renew(lease)) if lease is not None and held else None
        try:
            yield True
        finally:
            self.update_windows.append((started, time.time()))
            if renewing is not None:
                renewing.cancel()
                await asyncio.gather(renewing, return_exceptions=True)
                await asyncio.to_thread(lease.release)

    async def _renew(self, lease) -> None:
        while True:
            await asyncio.sleep(self.config.lease_ttl_s / 3)
            try:
                await asyncio.to_thread(lease.renew)
            except Exception as error:
                log.warning("renewing the fleet update lease: %s", error)

    def _promote_canary(self, version: str) -> Slot | None:
        """The canary slot when it already runs this version (loaded and smoke-tested: no second engine)."""
        canary = self.router.canary
        if canary is None or canary.version != version:
            return None
        self.router.canary = None
        self.metrics.serving_version.labels(version, "canary").set(0)
        canary.reset_stats()  # judged as champion from now on, not on its canary share
        return canary

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
        self._loaded.discard(slot)
        engine = underlying(slot.engine)
        engine_up = any(underlying(s.engine) is engine for s in self._in_use())
        if not engine_up:
            await engine.shutdown()
        await self.adapters.release(slot, self._in_use(), engine_up)
        download = _download_folder(self.versions_dir, slot.policy_dir)
        if download is not None and all(_download_folder(self.versions_dir, s.policy_dir) != download
                                        for s in self._in_use()):
            await asyncio.to_thread(shutil.rmtree, download, True)

    def _in_use(self) -> list[Slot]:
        return [s for s in (self.router.champion, self.router.canary, self.previous, self._replaced) if s is not None]

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
        if self.fleet is not None:
            await asyncio.to_thread(self.fleet.heartbeat)
            await self._follow_fleet_rollback()
        version = await asyncio.to_thread(self.registry.alias_version, c.alias)
        champion = self.router.champion.version if self.router.champion else ""
        if version and version != champion and version not in self.refused:
            if time.monotonic() - self.last_swap >= c.min_swap_interval_s and await self._fleet_allows(version):
                result = await self.swap_to(version)
                if result.ok and self.fleet is not None and self.router.champion.version == version:
                    await asyncio.to_thread(self.fleet.mark_taken_by_canary, version)
        if c.canary_alias and c.canary_fraction > 0:
            await self.set_canary(await asyncio.to_thread(self.registry.alias_version, c.canary_alias))

    async def _fleet_allows(self, version: str) -> bool:
        """Whether the fleet lets this replica take version now (always, without a fleet)."""
        if self.fleet is None:
            return True
        self._cleared_ms[version] = int(time.time() * 1000)
        tags = await asyncio.to_thread(self.registry.tags, version)
        if rolled_back_at_ms(tags) is not None:
            self.refused.add(version)
            self.say(f"serving swap-refused version={version} reason=rolled-back-by-fleet")
            return False
        if not await asyncio.to_thread(self.fleet.may_take, version, tags):
            if self._waiting_for != version:
                self._waiting_for = version
                self.say(f"serving swap-waiting version={version} for=fleet-canary")
            return False
        return True

    async def _follow_fleet_rollback(self) -> None:
        """Roll back in place when another replica rolled back the version serving here, after we took it."""
        champion = self.router.champion
        if champion is None or self.previous is None:
            return
        tags = await asyncio.to_thread(self.registry.tags, champion.version)
        at_ms = rolled_back_at_ms(tags)
        taken_ms = self._cleared_ms.get(champion.version, champion.loaded_at_ms)  # ForceSwap: when loaded
        if at_ms is not None and at_ms >= taken_ms and self.router.champion is champion:
            await self.rollback("fleet", tag=False)

    async def close(self) -> None:
        for task in [self._probation, *self._background]:
            if task is not None:
                task.cancel()
        slots = {*self._loaded, *self._in_use()}
        engines = {id(underlying(s.engine)): underlying(s.engine) for s in slots if s.engine is not None}
        self._loaded.clear()
        for engine in engines.values():
            await engine.shutdown()
        if self.fleet is not None and self.config.fleet_canary:
            await asyncio.to_thread(self.fleet.canary_lease.release)


def _download_folder(versions_dir: Path, policy_dir: Path) -> Path | None:
    """The folder a version was downloaded into (a child of versions_dir), or None for a folder of the user's."""
    try:
        relative = policy_dir.resolve().relative_to(versions_dir.resolve())
    except ValueError:
        return None
    return versions_dir.resolve() / relative.parts[0] if relative.parts else None


class _InPlaceFailed(RuntimeError):
    """The engine could not load the new weights in place (the old ones were put back)."""


def _load_tokenizer(policy_dir: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(policy_dir)
