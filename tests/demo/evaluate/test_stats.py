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
    half = 1.959963984540054 * statistics.stdev(diffs) / 2
    assert figures["ci95"] == pytest.approx([sum(diffs) / 4 - half, sum(diffs) / 4 + half])
    one_seed = paired_mean_difference([[b[0]] for b in before], [[a[0]] for a in after])
    old = paired_difference([b[0] for b in before], [a[0] for a in after])
    assert one_seed["difference"] == old["difference"] and one_seed["ci95"] == pytest.approx(old["ci95"])


def test_bootstrap_ratio_brackets_the_ratio_and_narrows_with_agreement():
    from demo.evaluate.stats import bootstrap_ratio

    base = [100.0 + i for i in range(30)]
    ratio, (low, high) = bootstrap_ratio([b * 1.02 for b in base], base)
    assert ratio == pytest.approx(1.02) and low == pytest.approx(1.02) and high == pytest.approx(1.02)
    noisy = [b * (1.02 + (0.05 if i % 2 else -0.05)) for i, b in enumerate(base)]
    ratio, (low, high) = bootstrap_ratio(noisy, base)
    assert low < ratio < high and low < 1.02 < high and high - low < 0.05
    assert bootstrap_ratio(noisy, base) == bootstrap_ratio(noisy, base)  # fixed resampling seed
