"""Wilson intervals against published values (Newcombe 1998, Statistics in Medicine 17:857, method 3)."""

from __future__ import annotations

import statistics

import pytest

from demo.evaluate.stats import wilson_interval


@pytest.mark.parametrize(("successes", "n", "low", "high"), [
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
    (5, 10, 0.2366, 0.7634),
])
def test_wilson_interval_matches_published_values(successes, n, low, high):
    assert wilson_interval(successes, n) == pytest.approx((low, high), abs=5e-5)


def test_all_successes_mirror_no_successes():
    low, high = wilson_interval(20, 20)
    assert high == 1.0 and low == pytest.approx(1 - 0.1611, abs=5e-5)


@pytest.mark.parametrize(("successes", "n"), [(0, 0), (-1, 5), (6, 5)])
def test_impossible_counts_are_refused(successes, n):
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


def test_paired_mean_difference_takes_the_task_as_the_unit():
    from demo.evaluate.stats import paired_difference, paired_mean_difference

    before = [[False, False, True], [True, True, True], [False, False, False], [False, True, False]]
    after = [[True, True, True], [True, True, False], [False, False, False], [True, True, False]]
    figures = paired_mean_difference(before, after)
    diffs = [2 / 3, -1 / 3, 0.0, 1 / 3]
    assert figures["n"] == 4 and figures["seeds"] == 3 and figures["gained"] == 2 and figures["lost"] == 1
    assert figures["difference"] == pytest.approx(sum(diffs) / 4)
    half = 3.182446305284263 * statistics.stdev(diffs) / 2  # Student t's 97.5 % quantile at 3 degrees of freedom
    assert figures["ci95"] == pytest.approx([sum(diffs) / 4 - half, sum(diffs) / 4 + half])
    one_seed = paired_mean_difference([[b[0]] for b in before], [[a[0]] for a in after])
    old = paired_difference([b[0] for b in before], [a[0] for a in after])
    assert one_seed["difference"] == old["difference"] and one_seed["ci95"] == pytest.approx(old["ci95"])


def test_paired_interval_covers_the_true_difference_95_times_in_100_at_8_tasks():
    """The interval is a t interval over tasks: on these runs a normal quantile covers 89 % and an interval over
    plays (as if a task's plays were independent) 78 % (checked)."""
    import random

    from demo.evaluate.stats import paired_mean_difference

    rng = random.Random(7)
    covered, runs = 0, 4000
    for _ in range(runs):
        # each task: base succeeds with its own chance, the adapter with that chance plus the task's own gain, 0 or
        # 0.6 (the true mean difference 0.3), under 4 seeds shared by both (one uniform draw each, as a paired seed)
        before, after = [], []
        for _task in range(8):
            chance, gain = rng.uniform(0.0, 0.4), rng.choice([0.0, 0.6])
            draws = [rng.random() for _seed in range(4)]
            before.append([u < chance for u in draws])
            after.append([u < chance + gain for u in draws])
        low, high = paired_mean_difference(before, after)["ci95"]
        covered += low <= 0.3 <= high
    assert 0.93 <= covered / runs <= 0.975


def test_bootstrap_ratio_brackets_the_ratio_and_narrows_with_agreement():
    from demo.evaluate.stats import bootstrap_ratio

    base = [100.0 + i for i in range(30)]
    ratio, (low, high) = bootstrap_ratio([b * 1.02 for b in base], base)
    assert ratio == pytest.approx(1.02) and low == pytest.approx(1.02) and high == pytest.approx(1.02)
    noisy = [b * (1.02 + (0.05 if i % 2 else -0.05)) for i, b in enumerate(base)]
    ratio, (low, high) = bootstrap_ratio(noisy, base)
    assert low < ratio < high and low < 1.02 < high and high - low < 0.05
    assert bootstrap_ratio(noisy, base) == bootstrap_ratio(noisy, base)  # fixed resampling seed
