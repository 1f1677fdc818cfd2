"""The three task families, each a small simulated environment with a verifiable outcome."""

from demo.product.tasks.base import OutcomeReport, StepResult, Task
from demo.product.tasks.coding import CodingTask
from demo.product.tasks.orchestrator import OrchestratorTask
from demo.product.tasks.search import SearchTask

FAMILIES = {"coding": CodingTask, "search": SearchTask, "orchestrator": OrchestratorTask}


def make_task(family: str, rng, task_id: str) -> Task:
    """A fresh task of `family`, drawn with `rng` (random.Random)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[family](rng, task_id)


__all__ = [
    "FAMILIES", "CodingTask", "OrchestratorTask", "OutcomeReport", "SearchTask", "StepResult", "Task", "make_task",
]
