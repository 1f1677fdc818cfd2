"""End the demo's traffic on a count, not a clock: once the product was served N trained versions.

How long N hot-swaps take depends on the machine (vLLM's start, Beam, DeepSpeed and the gate on busy
cores); counting them makes a run, and the end-to-end test built on it, mean the same on any machine.
demo.duration_s stays the ceiling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class StopAfterVersions:
    """Sets `stop` once `versions` versions other than the first one served have each served a session."""

    def __init__(self, versions: int, stop: threading.Event, say: Callable[[str], None]):
        self.versions = versions
        self.stop = stop
        self.say = say
        self.first: str | None = None
        self.swapped: list[str] = []  # trained versions in the order they first served a session
        self._lock = threading.Lock()  # sessions finish on the product's worker threads

    def on_session(self, session) -> None:
        version = session.served_version
        with self._lock:
            if self.first is None:
                self.first = version
            if version == self.first or version in self.swapped:
                return
            self.swapped.append(version)
            reached = bool(self.versions) and len(self.swapped) >= self.versions and not self.stop.is_set()
            if reached:
                self.stop.set()
        if reached:
            self.say(f"      served {len(self.swapped)} trained versions (v{', v'.join(self.swapped)}): "
                     "ending the traffic (demo.run.stop_after_versions)")
