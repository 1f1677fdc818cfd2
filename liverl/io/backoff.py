"""One exponential backoff with jitter, for every retry loop that waits on something else to come back."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays first_s, 2·first_s, 4·first_s, ... capped at cap_s, each scaled by a random factor in [0.5, 1.5)
    so that many clients that failed together do not retry together; reset() after a success."""

    first_s: float
    cap_s: float
    jitter: bool = True
    _failures: int = field(default=0, init=False)

    def next_delay(self) -> float:
        """The wait before the next try; each call doubles the following one (up to cap_s)."""
        delay = min(self.cap_s, self.first_s * 2 ** self._failures)
        self._failures = min(self._failures + 1, 64)  # 2**64 · first_s is past any cap: stop counting there
        return delay * (0.5 + random.random()) if self.jitter else delay

    def reset(self) -> None:
        self._failures = 0
