"""The held-out set and the training generator never share a task, and the held-out set is fixed by its seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from demo.product.tasks.chat.base import HELDOUT, TRAINING, split_of
from demo.product.tasks.chat.generate import FAMILIES, enumerated_keys, heldout_tasks, training_task


def test_heldout_set_has_200_distinct_tasks_over_the_three_families_and_is_fixed_by_its_seed():
    tasks = heldout_tasks(210, seed=0)
    assert Counter(t.family for t in tasks) == {"coding": 70, "search": 70, "orchestrator": 70}
    assert len({t.key for t in tasks}) == 210
    assert [t.key for t in heldout_tasks(210, seed=0)] == [t.key for t in tasks]
    assert [t.key for t in heldout_tasks(210, seed=1)] != [t.key for t in tasks]
    assert all(split_of(t.key) == HELDOUT for t in tasks)


def test_training_tasks_are_never_heldout_tasks_whatever_the_seed():
    heldout = {t.key for seed in range(3) for t in heldout_tasks(210, seed=seed)}
    drawn = Counter()
    for seed in range(4):
        rng = random.Random(seed)
        for i in range(600):
            family = list(FAMILIES)[i % 3]
            task = training_task(family, rng, f"t-{i}")
            assert split_of(task.key) == TRAINING and task.key not in heldout, task.key
            drawn[family] += 1
    assert min(drawn.values()) == 800


def test_the_split_partitions_the_enumerated_task_space():
    for family in ("coding", "search"):
        held, train = set(enumerated_keys(family, HELDOUT)), set(enumerated_keys(family, TRAINING))
        assert held and train and not held & train
        assert 0.15 < len(held) / (len(held) + len(train)) < 0.35  # about one in four


def test_an_unknown_family_names_the_known_ones():
    with pytest.raises(ValueError, match="choose from coding, search, orchestrator"):
        training_task("poetry", random.Random(0), "t")
