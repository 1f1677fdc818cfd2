"""End the demo's traffic as soon as one of its stage processes exits: every session after that would fail
(a serving process whose engine died exits 1 rather than answer errors), so the run stops and says which stage
ended and why, with the end of its log, instead of failing requests until the clock runs out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from demo.services import StageProcess


class StageWatch:
    def __init__(self, stages: Sequence[StageProcess], stop: threading.Event, say: Callable[[str], None],
                 interval_s: float = 1.0) -> None:
        self.stages, self.stop, self.say, self.interval_s = stages, stop, say, interval_s
        self.died: StageProcess | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="demo-stage-watch", daemon=True)

    def __enter__(self) -> StageWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.interval_s):
            died = next((stage for stage in self.stages if not stage.running()), None)
            if died is not None:
                self.died = died
                self.say(f"      stage {died.name} (pid {died.pid}) exited {died.process.returncode} during the "
                         "traffic: ending it")
                self.stop.set()
                return

    def raise_if_died(self) -> None:
        if self.died is not None:
            raise RuntimeError(f"`liverl {self.died.name}` exited {self.died.process.returncode} during the traffic; "
                               f"log {self.died.log}:\n{self.died.log_tail()}")
