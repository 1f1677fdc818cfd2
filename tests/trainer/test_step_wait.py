"""trainer.min_step_rows: a step waits for enough rows, or until max_step_wait_s, never forever."""

from trainer.step_wait import RowWait


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_step_waits_for_enough_rows_then_goes_on_what_there_is_after_the_wait():
    clock = Clock()
    wait = RowWait(min_rows=8, max_wait_s=60.0, clock=clock)
    assert not wait.ready(0)
    assert not wait.ready(3)
    clock.now += 59.0
    assert not wait.ready(5)
    clock.now += 1.0
    assert wait.ready(5), "waited max_step_wait_s: train on the 5 rows"
    assert not wait.ready(2), "the next step waits afresh"
    assert wait.ready(8)


def test_the_wait_restarts_when_the_rows_were_taken_and_one_row_is_enough_at_min_1():
    clock = Clock()
    wait = RowWait(min_rows=4, max_wait_s=10.0, clock=clock)
    assert not wait.ready(1)
    clock.now += 9.0
    assert not wait.ready(0)  # nothing pending (another reader took them): the wait starts over
    assert not wait.ready(1)
    clock.now += 9.0
    assert not wait.ready(1)
    assert RowWait(1, 10.0, clock).ready(1)
