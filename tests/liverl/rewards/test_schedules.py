"""Schedules: linear, cosine, constant, before start and after end."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from liverl.config.rewards import ScheduleConfig
from liverl.rewards.schedules import schedule_value


@pytest.mark.parametrize(("step", "expected"), [(0, 0.3), (250, 0.225), (500, 0.15), (1000, 0.0), (5000, 0.0)])
def test_linear_anneals_to_zero(step, expected):
    assert schedule_value(ScheduleConfig(start=0.3, end=0.0, end_step=1000), step) == pytest.approx(expected)


def test_cosine_is_slow_at_the_ends():
    schedule = ScheduleConfig(shape="cosine", start=4.0, end=2.0, end_step=100)
    assert schedule_value(schedule, 50) == pytest.approx(3.0)
    assert schedule_value(schedule, 25) == pytest.approx(4.0 - 2.0 * 0.5 * (1 - math.cos(math.pi / 4)))
    assert schedule_value(schedule, 100) == 2.0


def test_start_step_holds_the_start_value_and_constant_never_moves():
    delayed = ScheduleConfig(start=1.0, end=0.0, start_step=100, end_step=200)
    assert schedule_value(delayed, 50) == 1.0
    assert schedule_value(delayed, 150) == pytest.approx(0.5)
    assert schedule_value(ScheduleConfig(shape="constant", start=0.7), 10**6) == 0.7


def test_end_before_start_is_an_error_saying_so():
    with pytest.raises(ValidationError, match="before start_step"):
        ScheduleConfig(start_step=10, end_step=5)
