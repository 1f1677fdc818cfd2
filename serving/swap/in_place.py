"""The in-place swap (serving.swap_mode = "in_place"): one engine, its weights replaced under held requests.

The router holds new requests (labelled with the new version, waiting), the old version's requests finish on the
old weights, the engine loads the new weights (Engine.update_weights), the version's smoke test runs on it, and the
held requests run: one copy of the model, a pause of about the load time. When the load raises, the old weights
are put back and the version starts on a second engine instead (release_on_second_engine), the held requests
running there; when the smoke test fails, the old weights are put back and serve again. A rollback to a version
whose folder is still on disk takes this same path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from liverl.config.serving import ServingConfig
from serving.engines.engine import Engine
from serving.metrics import ServingMetrics
from serving.router import Hold, Router, Slot, underlying
from serving.swap.adapter_swap import on_engine
from serving.swap.result import BroughtIn, SwapError
from serving.swap.version_loader import VersionLoader

log = logging.getLogger("liverl.serving.swap")


class InPlaceFailed(RuntimeError):
    """The engine could not load the new weights in place (the old ones were put back)."""


def can_update_in_place(config: ServingConfig, champion: Slot | None) -> bool:
    return (config.swap_mode == "in_place" and champion is not None
            and hasattr(underlying(champion.engine), "update_weights"))


def on_champion_engine(fetched: Slot, champion: Slot) -> Slot:
    """A fetched version's slot on the champion's engine (the one an in-place update loads it into)."""
    return Slot(fetched.version, on_engine(underlying(champion.engine), fetched.adapter), fetched.tokenizer,
                fetched.policy_dir, fetched.source_uri, adapter=fetched.adapter)


async def swap_in_place(slot: Slot, router: Router, loader: VersionLoader, metrics: ServingMetrics,
                        say: Callable[[str], None]) -> BroughtIn:
    """Make slot (on the champion's engine) the champion by loading its weights into that engine. Raises SwapError
    when it cannot serve (the replaced champion serves again, the requests held for slot fail)."""
    hold = router.hold(slot)
    try:
        try:
            pause_s = await _update(hold, loader, metrics)
            return BroughtIn(slot, hold.previous, "in_place", pause_s)
        except InPlaceFailed as failure:  # the old weights are back; the held requests still wait
            log.warning("in-place update to version %s failed (%s); falling back to a second engine",
                        slot.version, failure)
            say(f"serving swap-fallback version={slot.version} mode=two_engine error={str(failure)[:200]!r}")
            return await release_on_second_engine(hold, loader, metrics)
    except BaseException as error:  # held requests fail (they were labelled version), new ones go back
        hold.fail(error if isinstance(error, SwapError) else SwapError(f"version {slot.version}: {error}"))
        raise


async def _update(hold: Hold, loader: VersionLoader, metrics: ServingMetrics) -> float:
    """Drain the old version, load the new weights, smoke them, release the held requests; returns how long they
    were held. InPlaceFailed when the load raised (old weights restored, still held); SwapError when the smoke
    failed (old weights restored and serving, held requests failed)."""
    slot, old = hold.slot, hold.previous
    drain_timeout_s = loader.config.drain_timeout_s
    if not await old.drained(drain_timeout_s):
        log.warning("version %s still had %d requests after %.0f s; updating anyway (the engine lets "
                    "them finish first)", old.version, old.in_flight, drain_timeout_s)
    try:
        report = await hold.engine.update_weights(slot.policy_dir, slot.version)
    except Exception as error:
        await _restore(hold.engine, old)
        raise InPlaceFailed(f"{type(error).__name__}: {error}") from error
    try:
        await loader.smoke(slot, hold.engine)
    except Exception as error:
        await _restore(hold.engine, old)
        failure = SwapError(f"version {slot.version} failed its smoke generation: {error}")
        hold.fail(failure)
        raise failure from error
    pause_s = hold.release()
    metrics.swap_pause.observe(pause_s)
    log.info("version %s loaded in place in %.3f s (requests held %.3f s, %s shared heads re-packed)",
             slot.version, report.get("seconds", 0.0), pause_s, report.get("repacked_heads", 0))
    return pause_s


async def _restore(engine: Engine, old: Slot) -> None:
    """Put the old version's weights (and adapter) back (its folders stay on disk for this)."""
    try:
        await on_engine(underlying(engine), old.adapter).update_weights(old.policy_dir, old.version)
    except Exception as error:  # nothing left to fall back to on this engine: say so loudly
        log.error("could not restore version %s in place after a failed update: %s", old.version, error)
        raise SwapError(f"restoring version {old.version} failed too ({error}): restart this replica") from error


async def release_on_second_engine(hold: Hold, loader: VersionLoader, metrics: ServingMetrics) -> BroughtIn:
    """An in-place update that could not load (old weights back, new requests still held): start the version on
    an engine of its own and run the held requests there."""
    slot = hold.slot
    loaded = await loader.load(slot.version, fetched=Slot(slot.version, None, slot.tokenizer, slot.policy_dir,
                                                          slot.source_uri, adapter=slot.adapter))
    loader.loaded.discard(loaded)
    loader.loaded.add(slot)
    pause_s = hold.release_to(loaded.engine)
    metrics.swap_pause.observe(pause_s)
    return BroughtIn(slot, hold.previous, "two_engine", pause_s)
