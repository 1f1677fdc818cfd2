"""When a step may start: once trainer.min_step_rows new rows are in the table, or it has waited max_step_wait_s.

Live traffic is distilled a few sessions per commit; a step on each commit as it lands spends a whole optimizer
update on one or two trajectories, the noisiest gradient there is.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RowWait:
    def __init__(self, min_rows: int, max_wait_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_rows, self.max_wait_s, self.clock = min_rows, max_wait_s, clock
        self.since: float | None = None  # when rows first waited for this step

    def ready(self, pending: int) -> bool:
        """Whether the step may start with `pending` rows there."""
        if pending == 0:
            self.since = None
            return False
        if pending >= self.min_rows:
            self.since = None
            return True
        now = self.clock()
        self.since = now if self.since is None else self.since
        if now - self.since >= self.max_wait_s:
            self.since = None
            return True
        return False
