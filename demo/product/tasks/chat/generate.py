"""The training task generator and the fixed held-out set, over disjoint halves of the task space.

    training_task("coding", rng, "t-1")        # any seed: only keys of the training split
    heldout_tasks(210, seed=0)                 # the families in turn, only keys of the held-out split

The split is by key (base.split_of), so no held-out task is ever a training task, whatever the seeds. Coding and
search keys are enumerated; orchestrator keys (2 or 3 corpus facts) are drawn until one of the wanted split comes.
"""

from __future__ import annotations

import random
from functools import lru_cache

from demo.product.tasks.chat.base import HELDOUT, TRAINING, ChatTask, split_of
from demo.product.tasks.chat.coding import ChatCodingTask, coding_keys
from demo.product.tasks.chat.corpus import load_corpus
from demo.product.tasks.chat.orchestrator import ChatOrchestratorTask, orchestrator_key
from demo.product.tasks.chat.search import ChatSearchTask, search_keys

FAMILIES = {"coding": ChatCodingTask, "search": ChatSearchTask, "orchestrator": ChatOrchestratorTask}
ORCHESTRATOR_PARTS = (2, 3)
HELDOUT_SEED_PREFIX = "liverl-real-heldout"


@lru_cache(maxsize=4)
def enumerated_keys(family: str, split: str) -> tuple[str, ...]:
    keys = coding_keys() if family == "coding" else search_keys()
    return tuple(key for key in keys if split_of(key) == split)


def draw_key(family: str, rng: random.Random, split: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose from {', '.join(FAMILIES)}")
    if family != "orchestrator":
        return rng.choice(enumerated_keys(family, split))
    docs = load_corpus()
    while True:
        picked = rng.sample(docs, rng.choice(ORCHESTRATOR_PARTS))
        key = orchestrator_key([doc.id for doc in picked])
        if split_of(key) == split:
            return key


def make_task(family: str, key: str, task_id: str) -> ChatTask:
    return FAMILIES[family](task_id, key)


def training_task(family: str, rng: random.Random, task_id: str) -> ChatTask:
    """A fresh training task of `family`, drawn with rng, never from the held-out split."""
    return make_task(family, draw_key(family, rng, TRAINING), task_id)


def heldout_tasks(n: int, seed: int = 0, families: tuple[str, ...] = tuple(FAMILIES)) -> list[ChatTask]:
    """The held-out set: n tasks, the families in turn, each family's keys without repeats while they last."""
    rng = random.Random(f"{HELDOUT_SEED_PREFIX}-{seed}")
    queues: dict[str, list[str]] = {}
    for family in families:
        if family == "orchestrator":
            wanted = -(-n // len(families))
            keys: list[str] = []
            while len(keys) < wanted:
                key = draw_key(family, rng, HELDOUT)
                if key not in keys:
                    keys.append(key)
        else:
            keys = list(enumerated_keys(family, HELDOUT))
            rng.shuffle(keys)
        queues[family] = keys
    tasks = []
    for index in range(n):
        family = families[index % len(families)]
        keys = queues[family]
        key = keys[(index // len(families)) % len(keys)]
        tasks.append(make_task(family, key, f"heldout-{family}-{seed}-{index}"))
    return tasks
