"""Which loaded version takes each request, and how many requests each version has in flight.

A request takes a lease on a slot when it starts and keeps it to its last token, so a switch only
affects requests that start after it; a replaced slot's engine is shut down once its leases end.
Everything here runs on the server's event loop (one thread), so plain counters are atomic.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from serving.engine import Engine

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(eq=False)
class Slot:
    """One loaded policy version."""

    version: str
    engine: Engine
    tokenizer: PreTrainedTokenizerBase  # the version's own tokenizer
    policy_dir: Path
    source_uri: str
    loaded_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    in_flight: int = 0
    served: int = 0
    failed: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=2048))  # seconds, most recent requests
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()

    def acquire(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def release(self, ok: bool, latency_s: float) -> None:
        self.in_flight -= 1
        self.served += 1
        self.failed += 0 if ok else 1
        self.latencies.append(latency_s)
        if self.in_flight == 0:
            self._idle.set()

    def reset_stats(self) -> None:
        self.served = self.failed = 0
        self.latencies.clear()

    def p99_latency_s(self) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    async def drained(self, timeout_s: float) -> bool:
        """Wait until no request holds this slot; False when timeout_s passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False


class Router:
    def __init__(self, canary_fraction: float = 0.0, rng: random.Random | None = None):
        self.champion: Slot | None = None
        self.canary: Slot | None = None
        self.canary_fraction = canary_fraction
        self._rng = rng or random.Random()

    def acquire(self) -> Slot:
        """The slot for a new request, leased: call slot.release() when the request ends."""
        slot = self.champion
        if slot is None:
            raise RuntimeError("no policy version is loaded yet")
        if self.canary is not None and self._rng.random() < self.canary_fraction:
            slot = self.canary
        slot.acquire()
        return slot

    def switch(self, new: Slot) -> Slot | None:
        """Make new the champion; returns the one it replaced (still loaded, still draining)."""
        old, self.champion = self.champion, new
        return old
