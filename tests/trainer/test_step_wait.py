"""trainer/step/wait.py: a group's step waits for min_step_rows of its own trajectories, a full token share, or the
longest wait, never forever; what it holds is one plan of everything drawn, and where a checkpoint must resume."""

from __future__ import annotations

from collections import Counter

from trainer.io.row_stream import StreamPosition
from trainer.step.builder import StepPlan
from trainer.step.trajectory import Trajectory
from trainer.step.wait import StepHold, merged


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def plan(*ids: str, length: int = 4, version: int = 0) -> StepPlan:
    rows = [Trajectory(tid, version, "coding", "", "single", ("1",), tuple(range(length)), (1,) * length,
                       (0.0,) * length) for tid in ids]
    return StepPlan(trajectories=rows, weights=[1.0] * len(rows), lags=[0] * len(rows), skipped=Counter(skip=1),
                    commits={version: None}, consumed=len(rows) + 1)


def test_a_group_waits_for_min_rows_of_its_own_then_steps_on_all_it_drew_in_order():
    hold = StepHold(min_rows=3, max_tokens=1000, max_wait_s=60.0, clock=Clock())
    first, later = StreamPosition(0, 0, False), StreamPosition(1, 2, False)
    assert hold.take(plan("a"), first) is None
    assert hold.take(None, later) is None  # nothing new drawn: still waiting
    assert [t.trajectory_id for t in hold.plan.trajectories] == ["a"] and hold.start == first
    assert hold.take(plan("b", version=1), later) is None and hold.start == first  # the first held row's position
    ready = hold.take(plan("c", version=2), StreamPosition(2, 0, False))
    assert [t.trajectory_id for t in ready.trajectories] == ["a", "b", "c"]
    assert ready.weights == [1.0] * 3 and ready.consumed == 6 and ready.skipped["skip"] == 3
    assert set(ready.commits) == {0, 1, 2}
    assert hold.plan is None and hold.start is None


def test_a_full_token_share_or_the_longest_wait_starts_the_step_with_fewer_rows():
    clock = Clock()
    hold = StepHold(min_rows=16, max_tokens=8, max_wait_s=30.0, clock=clock)
    assert [t.trajectory_id for t in hold.take(plan("a", "b", length=4), StreamPosition(0, 0, False)).trajectories] == \
        ["a", "b"]  # 8 tokens: a full share of a step
    assert hold.take(plan("c", length=2), StreamPosition(0, 2, False)) is None
    clock.now += 29.0
    assert hold.take(None, StreamPosition(0, 3, False)) is None
    clock.now += 1.0
    assert [t.trajectory_id for t in hold.take(None, StreamPosition(0, 3, False)).trajectories] == ["c"]


def test_plans_without_trajectories_are_never_held_and_min_1_steps_at_once():
    hold = StepHold(min_rows=1, max_tokens=1000, max_wait_s=60.0, clock=Clock())
    assert hold.take(StepPlan(consumed=3), StreamPosition(0, 0, False)) is None and hold.plan is None
    assert hold.take(plan("a"), StreamPosition(0, 3, False)).trajectories[0].trajectory_id == "a"


def test_release_hands_over_what_waited_and_the_next_wait_starts_afresh():
    clock = Clock()
    hold = StepHold(min_rows=4, max_tokens=1000, max_wait_s=10.0, clock=clock)
    hold.take(plan("a"), StreamPosition(0, 0, False))
    clock.now += 9.0
    assert [t.trajectory_id for t in hold.release().trajectories] == ["a"]
    assert hold.release() is None
    assert hold.take(plan("b"), StreamPosition(0, 1, False)) is None  # a new wait: 10 s from now, not from the first
    clock.now += 2.0
    assert hold.take(None, StreamPosition(0, 2, False)) is None


def test_merged_keeps_both_plans_order():
    both = merged(plan("a", version=0), plan("b", version=3))
    assert [t.trajectory_id for t in both.trajectories] == ["a", "b"] and both.lags == [0, 0]


def test_without_a_token_share_only_min_rows_or_the_wait_start_a_step():
    """One policy (no trainer.tenants.adapters): no token share, a step waits for min_step_rows or max_step_wait_s."""
    clock = Clock()
    hold = StepHold(min_rows=8, max_tokens=None, max_wait_s=60.0, clock=clock)
    assert hold.take(plan("a", "b", "c", length=400), StreamPosition(0, 0, False)) is None
    clock.now += 59.0
    assert hold.take(plan("d"), StreamPosition(0, 3, False)) is None
    clock.now += 1.0
    ready = hold.take(None, StreamPosition(0, 4, False))
    assert [t.trajectory_id for t in ready.trajectories] == ["a", "b", "c", "d"], "waited max_step_wait_s"
    assert hold.take(plan(*"abcdefgh"), StreamPosition(0, 4, False)) is not None  # 8 rows: at once
