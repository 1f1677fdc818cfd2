"""A table row as the trainer sees it: token columns, segments each scored as its own sequence, windows that
train long segments whole, and the sampling parameters of each span."""

from __future__ import annotations

import math

import pytest

from liverl.contracts.trajectory_row import SchemaVersionError
from tests.trainer.conftest import make_row
from trainer.step.batching import trajectory_samples
from trainer.step.trajectory import Window, from_row

# Two segments: [5 6 | 7 8 9] and [5 6 | 7 8]; the first two tokens of each are context (mask 0).
TOKENS = [5, 6, 7, 8, 9, 5, 6, 7, 8]
MASK = [0, 0, 1, 1, 1, 0, 0, 1, 1]


def _row(**columns) -> dict:
    return make_row("t", "", TOKENS, MASK, [0.0 if m == 0 else -1.0 for m in MASK]) | columns


def test_segments_come_from_segment_starts():
    trajectory = from_row(_row(segment_starts=[0, 5]), 0)
    assert trajectory.segment_starts == (0, 5)
    assert trajectory.segments() == [(0, 5), (5, 9)]
    assert trajectory.segments(max_seq_len=3) == [(0, 3), (5, 8)]  # max_seq_len applies per segment
    # Windows train what a cut would lose: every masked token but a segment's first counts, whatever max_seq_len.
    assert trajectory.trainable_tokens == 5 and trajectory.trainable_within(3) == 5


def test_long_segments_are_split_into_windows_that_are_all_trained():
    trajectory = from_row(_row(segment_starts=[0, 5]), 0)
    # max_seq_len 3, stride 1: segment [0, 5) is [0,3) then windows training 3 and 4, each with 3 tokens in all.
    assert trajectory.windows(3) == [Window(0, 0, 3, 0), Window(1, 3, 4, 1), Window(2, 4, 5, 2),
                                     Window(5, 5, 8, 0), Window(6, 8, 9, 1)]
    samples = trajectory_samples(trajectory, 0.5, max_seq_len=3, advantage=2.0)
    assert [s.token_ids for s in samples] == [[5, 6, 7], [6, 7, 8], [7, 8, 9], [5, 6, 7], [6, 7, 8]]
    assert [s.loss_mask for s in samples] == [[0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1]]
    assert [s.position_offset for s in samples] == [0, 1, 2, 0, 1]  # positions as serving had them
    # Each masked token is trained exactly once, with the trajectory's advantage and weight.
    assert sum(sum(s.loss_mask[1:]) for s in samples) == trajectory.trainable_tokens == 5
    assert {(s.advantage, s.weight) for s in samples} == {(2.0, 0.5)}


def test_windows_stride_half_the_context():
    trajectory = from_row(make_row("w", "", list(range(10)), [1] * 10, [-1.0] * 10), 0)
    # max_seq_len 4, stride 2: [0,4) then train [4,6) after [2,4), then [6,8), then [8,10).
    assert [(w.start, w.trained_from, w.end) for w in trajectory.windows(4)] == [(0, 0, 4), (2, 4, 6), (4, 6, 8),
                                                                                  (6, 8, 10)]
    assert [(w.start, w.trained_from, w.end) for w in trajectory.windows(64)] == [(0, 0, 10)]


def test_span_sampling_parameters_reach_every_token_of_their_span():
    row = _row(span_starts=[0, 5], span_ends=[5, 9], span_policy_versions=["1", "1"],
               span_temperature=[0.7, 0.0], span_top_p=[0.9, 1.0], span_top_k=[20, 0], schema_version=2)
    trajectory = from_row(row, 0)
    assert trajectory.token_sampling(3, 7) == ([0.7, 0.7, 0.0, 0.0], [0.9, 0.9, 1.0, 1.0], [20, 20, 0, 0])
    only_temperature = from_row(_row(span_starts=[0], span_ends=[9], span_temperature=[0.5]), 0)
    assert only_temperature.token_sampling(0, 2) == ([0.5, 0.5], [1.0, 1.0], [0, 0])  # empty columns: no-op
    unrecorded = from_row(make_row("t", "", TOKENS, MASK, [-1.0] * 9, sampling=None), 0)  # no sampling columns
    temperature, top_p, top_k = unrecorded.token_sampling(0, 1)
    assert unrecorded.span_sampling == () and math.isnan(temperature[0]) and (top_p, top_k) == ([1.0], [0])
    partly = from_row(_row(span_starts=[0, 5], span_ends=[5, 9], span_policy_versions=["1", "1"],
                           span_temperature=[0.7, float("nan")],
                           span_top_p=[0.9, 1.0], span_top_k=[0, 0]), 0)  # the second call did not record it
    assert partly.token_sampling(4, 5)[0] == [pytest.approx(0.7)] and math.isnan(partly.token_sampling(5, 6)[0][0])


def test_rows_are_read_through_the_typed_row():
    assert from_row(_row(first_served_ms=None), 0).first_served_ms is None  # unknown, never 0
    with pytest.raises(SchemaVersionError):
        from_row(_row(schema_version=99), 0)
    with pytest.raises(ValueError, match="span_starts"):
        from_row(_row(span_temperature=[0.7, 0.7]), 0)  # one span, two temperatures
    with pytest.raises(ValueError, match="one entry per token"):
        from_row(_row(loss_mask=[0, 1]), 0)


@pytest.mark.parametrize("old", [None, []])
def test_rows_without_segment_starts_are_one_segment(old):
    for row in (_row(segment_starts=old), {k: v for k, v in _row().items() if k != "segment_starts"}):
        trajectory = from_row(row, 0)
        assert trajectory.segments() == [(0, 9)] and trajectory.segments(4) == [(0, 4)]
        assert trajectory.trainable_tokens == 5 and len(trajectory.windows(64)) == 1


def test_empty_segments_left_by_calls_without_tokens_are_dropped():
    assert from_row(_row(segment_starts=[0, 5, 5, 9]), 0).segments() == [(0, 5), (5, 9)]


@pytest.mark.parametrize("starts", [[1, 5], [0, 5, 3], [0, 12]])
def test_segment_starts_that_do_not_tile_the_tokens_are_refused(starts):
    with pytest.raises(ValueError, match="segment_starts"):
        from_row(_row(segment_starts=starts), 0)
