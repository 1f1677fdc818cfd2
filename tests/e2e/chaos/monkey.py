"""The chaos monkey: a seeded schedule of kill -9s, every stage at least once, each followed by a restart."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tests.e2e.chaos.stages import ChaosStage


@dataclass(frozen=True)
class Kill:
    at_s: float  # seconds after the traffic started
    stage: str
    pause_s: float  # how long the stage stays dead before its restart


def kill_schedule(rng: random.Random, stages: Sequence[str], window: tuple[float, float], extra_kills: int,
                  min_gap_s: float, pause_s: tuple[float, float]) -> list[Kill]:
    """One kill per stage plus up to `extra_kills` on random stages, at random times in `window`, in time order.

    Two kills of one stage are at least min_gap_s apart, so a restarted stage gets to work before it dies again;
    an extra kill that finds no such room is left out (a stage's own first kill never is: that raises).
    """
    first, last = window
    kills: list[Kill] = []
    wanted = list(stages) + [rng.choice(stages) for _ in range(extra_kills)]
    for stage in wanted:
        for _ in range(100):
            at = rng.uniform(first, last)
            if all(k.stage != stage or abs(k.at_s - at) >= min_gap_s for k in kills):
                kills.append(Kill(round(at, 1), stage, round(rng.uniform(*pause_s), 1)))
                break
    missing = set(stages) - {k.stage for k in kills}
    if missing:
        raise ValueError(f"no room in window {window} to kill {sorted(missing)}; widen it or lower min_gap_s")
    return sorted(kills, key=lambda k: k.at_s)


class ChaosMonkey:
    """Runs the schedule in a thread from start(); between kills it revives stages that died on their own."""

    def __init__(self, stages: Mapping[str, ChaosStage], schedule: list[Kill], say: Callable[[str], None]):
        self.stages = stages
        self.schedule = schedule
        self.say = say
        self.done: list[tuple[Kill, int]] = []  # each kill carried out, with the PID it killed
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monkey", daemon=True)
        self._started = 0.0

    def start(self) -> "ChaosMonkey":
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after the kill (and restart) in progress, if any."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            for kill in self.schedule:
                if not self._wait_until(self._started + kill.at_s):
                    return
                stage = self.stages[kill.stage]
                pid = stage.kill()
                self.done.append((kill, pid))
                self.say(f"      t={time.monotonic() - self._started:5.1f}s kill -9 {kill.stage} (pid {pid}), "
                         f"restart in {kill.pause_s:.1f}s")
                self._stop.wait(kill.pause_s)  # restart even when asked to stop: the drain needs every stage
                stage.restart()
            self._wait_until(float("inf"))
        except BaseException as error:  # surfaced by the test: a monkey that dies silently proves nothing
            self.error = error

    def _wait_until(self, when: float) -> bool:
        """Sleep until `when`, reviving stages that exited by themselves; False when asked to stop."""
        while time.monotonic() < when:
            for stage in self.stages.values():
                if stage.revive_if_exited():
                    self.say(f"      {stage.name} exited by itself; restarted (pid {stage.pid})")
            if self._stop.wait(min(1.0, max(0.0, when - time.monotonic()))):
                return False
        return True
