"""A table row as the trainer sees it: token columns, and the segments each scored as its own sequence."""

from __future__ import annotations

import pytest

from tests.trainer.conftest import make_row
from trainer.trajectory import from_row

# Two segments: [5 6 | 7 8 9] and [5 6 | 7 8]; the first two tokens of each are context (mask 0).
TOKENS = [5, 6, 7, 8, 9, 5, 6, 7, 8]
MASK = [0, 0, 1, 1, 1, 0, 0, 1, 1]


def _row(**columns) -> dict:
    return make_row("t", "", TOKENS, MASK, [0.0 if m == 0 else -1.0 for m in MASK]) | columns


def test_segments_come_from_segment_starts_and_each_is_cut_to_the_context():
    trajectory = from_row(_row(segment_starts=[0, 5]), 0)
    assert trajectory.segment_starts == (0, 5)
    assert trajectory.segments() == [(0, 5), (5, 9)]
    assert trajectory.segments(max_seq_len=3) == [(0, 3), (5, 8)]  # max_seq_len applies per segment
    assert trajectory.trainable_tokens == 5 and trajectory.trainable_within(3) == 2


@pytest.mark.parametrize("old", [None, []])
def test_rows_without_segment_starts_are_one_segment(old):
    for row in (_row(segment_starts=old), {k: v for k, v in _row().items() if k != "segment_starts"}):
        trajectory = from_row(row, 0)
        assert trajectory.segments() == [(0, 9)] and trajectory.segments(4) == [(0, 4)]
        assert trajectory.trainable_tokens == 5


def test_empty_segments_left_by_calls_without_tokens_are_dropped():
    assert from_row(_row(segment_starts=[0, 5, 5, 9]), 0).segments() == [(0, 5), (5, 9)]


@pytest.mark.parametrize("starts", [[1, 5], [0, 5, 3], [0, 12]])
def test_segment_starts_that_do_not_tile_the_tokens_are_refused(starts):
    with pytest.raises(ValueError, match="segment_starts"):
        from_row(_row(segment_starts=starts), 0)
