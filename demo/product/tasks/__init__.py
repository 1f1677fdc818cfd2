"""The product's three task families (coding, search, orchestrator), each a small simulated environment with a
verifiable outcome. The toy policy plays them here, in a word grammar (grammar.py); a real chat model plays them in
chat/, with the same families and the same OutcomeReport, through the same traffic loop (demo/product/traffic.py)."""

from demo.product.tasks.base import OutcomeReport, Task, ToolOutput
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
    "FAMILIES", "CodingTask", "OrchestratorTask", "OutcomeReport", "SearchTask", "ToolOutput", "Task", "make_task",
]
