"""The training task generator and the fixed held-out sets (dev and final), over disjoint parts of the task space.

    training_task("coding", rng, "t-1")        # any seed: only keys of the training split
    heldout_tasks(210)                         # the final split: the families in turn, out-of-template and
                                               # in-template tasks in turn within each family
    heldout_tasks(210, split="dev")            # the split configs are tuned on

The split is by key and template (base.split_of), so no held-out task is ever a training task, and no training
task ever uses a held-out template, whatever the seeds. Coding and search keys are enumerated; orchestrator keys
(2 or 3 corpus facts) are drawn until one of the wanted split (and part) comes.
"""

from __future__ import annotations

import random
from functools import lru_cache

from demo.product.tasks.chat.base import FINAL, HELDOUT_SPLITS, PARTS, TRAINING, ChatTask
from demo.product.tasks.chat.coding import ChatCodingTask, coding_keys
from demo.product.tasks.chat.corpus import load_corpus
from demo.product.tasks.chat.orchestrator import ChatOrchestratorTask, orchestrator_key
from demo.product.tasks.chat.search import ChatSearchTask, search_keys

FAMILIES: dict[str, type[ChatTask]] = {"coding": ChatCodingTask, "search": ChatSearchTask,
                                       "orchestrator": ChatOrchestratorTask}
ORCHESTRATOR_PARTS = (2, 3)
HELDOUT_SEED_PREFIX = "liverl-real-heldout"
TRAINING_DRAWS = ("key", "template")  # how training tasks are drawn (draw_key); demo.real.training_draw


def split_of(family: str, key: str) -> str:
    """TRAINING, DEV or FINAL (demo/product/tasks/chat/base.py)."""
    return FAMILIES[family].split_of_key(key)


def part_of(family: str, key: str) -> str:
    """OUT_OF_TEMPLATE or IN_TEMPLATE (for a held-out key: what it tests)."""
    return FAMILIES[family].part_of_key(key)


def all_keys(family: str) -> list[str]:
    """Every key of an enumerable family (coding, search)."""
    return coding_keys() if family == "coding" else search_keys()


@lru_cache(maxsize=16)
def enumerated_keys(family: str, split: str, part: str | None = None) -> tuple[str, ...]:
    return tuple(key for key in all_keys(family)
                 if split_of(family, key) == split and (part is None or part_of(family, key) == part))


@lru_cache(maxsize=16)
def keys_by_template(family: str, split: str) -> tuple[tuple[str, ...], ...]:
    """The split's keys of an enumerable family, one tuple per template (in template order)."""
    grouped: dict[str, list[str]] = {}
    for key in enumerated_keys(family, split):
        grouped.setdefault(FAMILIES[family].templates_of(key)[0], []).append(key)
    return tuple(tuple(keys) for _, keys in sorted(grouped.items()))


def draw_key(family: str, rng: random.Random, split: str, part: str | None = None, draw: str = "key") -> str:
    """A key of the split (and part). draw: "key", every key alike (a template with more keys, such as one per K,
    comes more often); "template", a template first, every template alike, then one of its keys (coding and
    search; the orchestrator's keys are drawn fact by fact either way)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose from {', '.join(FAMILIES)}")
    if draw not in TRAINING_DRAWS:
        raise ValueError(f"unknown training draw {draw!r}; choose from {', '.join(TRAINING_DRAWS)}")
    if draw == "template" and part is not None:
        raise ValueError("a template draw takes the whole split: it has no part (held-out sets draw by key)")
    if family != "orchestrator":
        by_template = draw == "template"
        return rng.choice(rng.choice(keys_by_template(family, split)) if by_template
                          else enumerated_keys(family, split, part))
    docs = load_corpus()
    while True:
        picked = rng.sample(docs, rng.choice(ORCHESTRATOR_PARTS))
        key = orchestrator_key([doc.id for doc in picked])
        if split_of(family, key) == split and (part is None or part_of(family, key) == part):
            return key


def make_task(family: str, key: str, task_id: str) -> ChatTask:
    return FAMILIES[family](task_id, key)


def training_task(family: str, rng: random.Random, task_id: str, draw: str = "key") -> ChatTask:
    """A fresh training task of `family`, drawn with rng (draw: see draw_key), never from a held-out split nor of a
    held-out template."""
    return make_task(family, draw_key(family, rng, TRAINING, draw=draw), task_id)


def heldout_tasks(n: int, seed: int = 0, split: str = FINAL,
                  families: tuple[str, ...] = tuple(FAMILIES)) -> list[ChatTask]:
    """A held-out set of the split (FINAL: what the demo reports; DEV: what configs are tuned on): n tasks, the
    families in turn, and within a family out-of-template and in-template tasks in turn, each part's keys without
    repeats while they last. Fixed by (split, seed)."""
    if split not in HELDOUT_SPLITS:
        raise ValueError(f"unknown held-out split {split!r}; choose from {', '.join(HELDOUT_SPLITS)}")
    rng = random.Random(f"{HELDOUT_SEED_PREFIX}-{split}-{seed}")
    wanted = -(-n // (len(families) * len(PARTS)))  # tasks of one family and part
    queues: dict[tuple[str, str], list[str]] = {}
    for family in families:
        for part in PARTS:
            if family == "orchestrator":
                keys: list[str] = []
                while len(keys) < wanted:
                    key = draw_key(family, rng, split, part)
                    if key not in keys:
                        keys.append(key)
            else:
                keys = list(enumerated_keys(family, split, part))
                rng.shuffle(keys)
            queues[(family, part)] = keys
    tasks = []
    for index in range(n):
        family = families[index % len(families)]
        turn = index // len(families)  # this family's turn
        keys = queues[(family, PARTS[turn % len(PARTS)])]
        key = keys[(turn // len(PARTS)) % len(keys)]
        tasks.append(make_task(family, key, f"heldout-{family}-{split}-{seed}-{index}"))
    return tasks
