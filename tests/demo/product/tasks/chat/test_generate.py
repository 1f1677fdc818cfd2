"""The held-out sets and the training generator never share a task nor a held-out template, the held-out sets are
split into dev and final, and each is fixed by its seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from demo.product.tasks.chat.base import DEV, FINAL, IN_TEMPLATE, OUT_OF_TEMPLATE, TRAINING
from demo.product.tasks.chat.generate import (FAMILIES, all_keys, draw_key, enumerated_keys, heldout_tasks, part_of,
                                              split_of, training_task)


def test_final_set_has_210_distinct_tasks_over_the_families_and_parts_and_is_fixed_by_its_seed():
    tasks = heldout_tasks(210)
    assert Counter((t.family, t.part) for t in tasks) == {(f, p): 35 for f in FAMILIES
                                                           for p in (OUT_OF_TEMPLATE, IN_TEMPLATE)}
    assert len({t.key for t in tasks}) > 200  # search has 28 in-template final facts: a few repeat
    assert [t.key for t in heldout_tasks(210)] == [t.key for t in tasks]
    assert [t.key for t in heldout_tasks(210, seed=1)] != [t.key for t in tasks]
    assert all(t.split == FINAL for t in tasks) and all(t.split == DEV for t in heldout_tasks(210, split=DEV))


def test_training_tasks_are_never_heldout_tasks_whatever_the_seed():
    heldout = {t.key for seed in range(3) for split in (DEV, FINAL) for t in heldout_tasks(210, seed, split)}
    drawn = Counter()
    for seed in range(4):
        rng = random.Random(seed)
        for i in range(600):
            family = list(FAMILIES)[i % 3]
            task = training_task(family, rng, f"t-{i}")
            assert task.split == TRAINING and task.part == IN_TEMPLATE and task.key not in heldout, task.key
            drawn[family] += 1
    assert min(drawn.values()) == 800


def test_a_template_draw_gives_every_training_template_alike_and_never_a_heldout_key():
    heldout = {t.key for split in (DEV, FINAL) for t in heldout_tasks(210, 0, split)}
    for family in ("coding", "search"):
        templates = {FAMILIES[family].templates_of(key)[0] for key in enumerated_keys(family, TRAINING)}
        rng, n = random.Random(7), 400 * len(templates)
        by_key = Counter(FAMILIES[family].templates_of(training_task(family, rng, "t").key)[0] for _ in range(n))
        by_template = Counter()
        for i in range(n):
            task = training_task(family, rng, f"t-{i}", draw="template")
            assert task.split == TRAINING and task.key not in heldout, task.key
            by_template[FAMILIES[family].templates_of(task.key)[0]] += 1
        assert set(by_template) == templates
        share = 1 / len(templates)  # each within 5 binomial standard deviations of its share
        assert all(abs(count - n * share) < 5 * (n * share * (1 - share)) ** 0.5 for count in by_template.values())
        if family == "coding":  # a key draw gives the one-key templates (largest, total, ...) next to nothing
            assert min(by_key.get(t, 0) for t in templates) < n * share / 5
    with pytest.raises(ValueError, match="unknown training draw"):
        training_task("coding", random.Random(0), "t", draw="")
    with pytest.raises(ValueError, match="no part"):
        draw_key("coding", random.Random(0), TRAINING, IN_TEMPLATE, draw="template")


def _templates(family: str, key: str) -> tuple[str, ...]:
    return FAMILIES[family].templates_of(key)


def test_no_training_key_uses_a_heldout_template_over_every_enumerable_key():
    """Issue #39: the held-out coding tasks were near-copies of training tasks (same template and K)."""
    for family in ("coding", "search"):
        trained = {t for key in enumerated_keys(family, TRAINING) for t in _templates(family, key)}
        for split in (DEV, FINAL):
            out = enumerated_keys(family, split, OUT_OF_TEMPLATE)
            assert out and not {t for key in out for t in _templates(family, key)} & trained, (family, split)
        for key in all_keys(family):
            if set(_templates(family, key)) & set(FAMILIES[family].HELDOUT_TEMPLATES):
                assert split_of(family, key) != TRAINING and part_of(family, key) == OUT_OF_TEMPLATE, key
    rng = random.Random(0)  # orchestrator keys are drawn, not enumerated: many draws
    held = set(FAMILIES["orchestrator"].HELDOUT_TEMPLATES)
    for i in range(3000):
        task = training_task("orchestrator", rng, f"t-{i}")
        assert not set(_templates("orchestrator", task.key)) & held, task.key


def test_out_of_template_coding_tasks_share_no_description_or_test_values_with_training():
    trained = {(key.split("/")[1], key.split("/")[3]) for key in enumerated_keys("coding", TRAINING)}
    coding = [t for t in heldout_tasks(210) if t.family == "coding"]
    out = [t for t in coding if t.part == OUT_OF_TEMPLATE]
    assert len(out) == 35 and not [t.key for t in out if (t.template.id, str(t.k)) in trained]
    training_texts = {training_task("coding", random.Random(i), "t").request_text().split("` that ")[1]
                      for i in range(400)}
    assert not {t.request_text().split("` that ")[1] for t in out} & training_texts


def test_dev_and_final_share_no_key_and_no_heldout_template():
    for family in FAMILIES:
        splits = FAMILIES[family].HELDOUT_TEMPLATES
        assert {DEV, FINAL} <= set(splits.values()), family
    for family in ("coding", "search"):
        dev, final = set(enumerated_keys(family, DEV)), set(enumerated_keys(family, FINAL))
        assert dev and final and not dev & final
        assert not {t for k in dev for t in _templates(family, k)} & {
            t for k in final for t in _templates(family, k) if FAMILIES[family].HELDOUT_TEMPLATES.get(t) == FINAL}


def test_the_split_partitions_the_enumerated_task_space():
    for family in ("coding", "search"):
        parts = [set(enumerated_keys(family, split)) for split in (TRAINING, DEV, FINAL)]
        assert all(parts) and sum(map(len, parts)) == len(set().union(*parts)) == len(all_keys(family))
        in_template = [k for k in all_keys(family) if part_of(family, k) == IN_TEMPLATE]
        held = [k for k in in_template if split_of(family, k) != TRAINING]
        assert 0.15 < len(held) / len(in_template) < 0.35  # of training templates' keys, about one in four


def test_an_unknown_family_or_split_names_the_known_ones():
    with pytest.raises(ValueError, match="choose from coding, search, orchestrator"):
        training_task("poetry", random.Random(0), "t")
    with pytest.raises(ValueError, match="choose from dev, final"):
        heldout_tasks(3, split="training")
