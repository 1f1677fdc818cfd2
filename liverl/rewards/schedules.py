"""Step schedules the trainer follows: PARL's lambdas annealed to 0, Context-1's beta from 4 to 2."""

from __future__ import annotations

import math

from liverl.config.rewards import ScheduleConfig


def schedule_value(schedule: ScheduleConfig, step: int) -> float:
    """`start` until start_step, then linear or cosine to `end` at end_step, then `end`."""
    if schedule.shape == "constant":
        return schedule.start
    if step <= schedule.start_step:
        return schedule.start
    if step >= schedule.end_step:
        return schedule.end
    progress = (step - schedule.start_step) / (schedule.end_step - schedule.start_step)
    if schedule.shape == "cosine":
        progress = 0.5 * (1.0 - math.cos(math.pi * progress))
    return schedule.start + (schedule.end - schedule.start) * progress
