"""The data-parallel step under the name the loop and the benches call: trainer/training_step.py run_step
is one step for any number of ranks; this returns its trained trajectory ids alongside."""

from __future__ import annotations

from liverl.config import LiverlConfig
from trainer.advantages import Baselines
from trainer.ranks import Ranks
from trainer.step_builder import StepPlan
from trainer.training_step import StepResult, deal, run_step

__all__ = ["deal", "run_sharded_step"]


def run_sharded_step(engine, plan: StepPlan, step: int, baselines: Baselines, config: LiverlConfig, ranks: Ranks,
                     reference=None) -> tuple[StepResult, list[str]]:
    """(the step's result, summed over ranks; the trajectory ids this rank trained)."""
    result = run_step(engine, plan, step, baselines, config, reference, ranks)
    return result, list(result.trained_ids)
