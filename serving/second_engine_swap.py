"""The two-engine swap (serving.swap_mode = "two_engine", and the in-place swap's fallback): the version starts on
an engine of its own beside the serving one, passes its smoke test there, and the router switches to it with one
assignment (Router.switch). Requests that started before keep the old engine to their last token; it is shut down
once they are done (or after the probation window, so a rollback is a switch back)."""

from __future__ import annotations

from serving.metrics import ServingMetrics
from serving.router import Hold, Router, Slot
from serving.swap_result import BroughtIn
from serving.version_loader import VersionLoader


async def swap_to_second_engine(fetched: Slot, router: Router, loader: VersionLoader) -> BroughtIn:
    """Start the fetched version on an engine of its own, smoke-test it, switch to it. Raises SwapError."""
    slot = await loader.load(fetched.version, fetched=fetched)
    return BroughtIn(slot, router.switch(slot), "two_engine")


async def switch_back(target: Slot, router: Router, loader: VersionLoader) -> BroughtIn:
    """Serve again a version whose engine is still up (a rollback within probation), once it passes its smoke test
    again, as every version does before it takes traffic."""
    await loader.smoke(target)
    return BroughtIn(target, router.switch(target), "two_engine")


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
