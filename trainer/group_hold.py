"""A tenant group's step waits for enough of its own rows: trainer.min_step_rows trajectories, a full share of a step
(trainer.tenants.tokens_per_step), or max_step_wait_s since it began to wait (trainer/step_wait.py's rule).

The table's commits count every tenant's rows, so the wait counts what the group's stream actually drew: drawn
plans are held and merged until the step may start. Held rows are off the stream but not trained, so a checkpoint
taken meanwhile must resume the group from `start`, the stream's position before the first held row (rows drawn
again from the same table version are trained, not skipped as duplicates: trainer/step_builder.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trainer.row_stream import Position
from trainer.step_builder import StepPlan
from trainer.step_wait import RowWait


class GroupHold:
    def __init__(self, min_rows: int, max_tokens: int, max_wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_tokens = max_tokens
        self.wait = RowWait(min_rows, max_wait_s, clock)
        self.plan: StepPlan | None = None
        self.start: Position | None = None  # where the group's stream stood before the first held row

    def take(self, drawn: StepPlan | None, before: Position) -> StepPlan | None:
        """Hold the trajectories of a freshly drawn plan (None: nothing new was drawn); the held plan once the step
        may start, else None. before: the stream's position before this plan was drawn."""
        if drawn is not None and not drawn.empty:
            if self.plan is None:
                self.plan, self.start = drawn, before
            else:
                self.plan = merged(self.plan, drawn)
        return self.release() if self._ready() else None

    def release(self) -> StepPlan | None:
        """Whatever is held, now (the end of a run that does not follow the table)."""
        plan, self.plan, self.start = self.plan, None, None
        self.wait.ready(0)  # the next wait starts afresh
        return plan

    def _ready(self) -> bool:
        if self.plan is None:
            return False
        tokens = sum(len(t.token_ids) for t in self.plan.trajectories)
        return tokens >= self.max_tokens or self.wait.ready(len(self.plan.trajectories))


def merged(first: StepPlan, then: StepPlan) -> StepPlan:
    """One plan of both plans' trajectories, in the order they were drawn."""
    return StepPlan(
        trajectories=first.trajectories + then.trajectories, weights=first.weights + then.weights,
        lags=first.lags + then.lags, skipped=first.skipped + then.skipped, commits={**first.commits, **then.commits},
        consumed=first.consumed + then.consumed,
    )
