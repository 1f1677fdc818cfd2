"""Wilson intervals against published values (Newcombe 1998, Statistics in Medicine 17:857, method 3)."""

from __future__ import annotations

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
