"""When a group's step may start: once it drew trainer.min_step_rows trajectories of its own, a full share of a step
(trainer.tenants.tokens_per_step), or max_step_wait_s after it began to wait; then it trains on what it holds.

Live traffic is distilled a few sessions per commit; a step on each commit as it lands spends a whole optimizer
update on one or two trajectories, the noisiest gradient there is. The table's commits count every tenant's rows,
so the wait counts what the group's stream actually drew: drawn plans are held and merged until the step may start.
Held rows are off the stream but not trained, so a checkpoint taken meanwhile must resume the group from `start`,
the stream's position before the first held row (rows drawn again from the same table version are trained, not
skipped as duplicates: trainer/step/builder.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trainer.io.row_stream import StreamPosition
from trainer.step.builder import StepPlan


class StepHold:
    def __init__(self, min_rows: int, max_tokens: int | None, max_wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.min_rows, self.max_tokens, self.max_wait_s, self.clock = min_rows, max_tokens, max_wait_s, clock
        self.plan: StepPlan | None = None
        self.start: StreamPosition | None = None  # where the group's stream stood before the first held row
        self.since: float | None = None  # when the held rows began to wait

    def take(self, drawn: StepPlan | None, before: StreamPosition) -> StepPlan | None:
        """Hold the trajectories of a freshly drawn plan (None: nothing new was drawn); the held plan once the step
        may start, else None. before: the stream's position before this plan was drawn."""
        if drawn is not None and not drawn.empty:
            if self.plan is None:
                self.plan, self.start, self.since = drawn, before, self.clock()
            else:
                self.plan = merged(self.plan, drawn)
        return self.release() if self._ready() else None

    def release(self) -> StepPlan | None:
        """Whatever is held, now (the end of a run that does not follow the table)."""
        plan, self.plan, self.start, self.since = self.plan, None, None, None
        return plan

    def _ready(self) -> bool:
        if self.plan is None:
            return False
        if len(self.plan.trajectories) >= self.min_rows:
            return True
        tokens = sum(len(t.token_ids) for t in self.plan.trajectories)
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return True
        return self.since is not None and self.clock() - self.since >= self.max_wait_s


def merged(first: StepPlan, then: StepPlan) -> StepPlan:
    """One plan of both plans' trajectories, in the order they were drawn."""
    return StepPlan(
        trajectories=first.trajectories + then.trajectories, weights=first.weights + then.weights,
        lags=first.lags + then.lags, skipped=first.skipped + then.skipped, commits={**first.commits, **then.commits},
        consumed=first.consumed + then.consumed,
    )
