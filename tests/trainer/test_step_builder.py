"""Samples are windows of segments: one per segment (or per window of a long one), and the step's token budget
counts them."""

from __future__ import annotations

from tests.trainer.conftest import commit_batch, make_row, step_sizes
from trainer.step.batching import trajectory_samples as to_samples
from trainer.step.trajectory import from_row


def _row(tid: str, starts=(0, 4), **kwargs) -> dict:
    tokens, mask = [5, 6, 7, 8, 9, 6, 7, 8], [0, 1, 1, 1, 0, 1, 1, 1]
    row = make_row(tid, "", tokens, mask, [-0.5 * m for m in mask], **kwargs)
    return row | {"segment_starts": list(starts)} if starts is not None else row


def test_one_sample_per_segment_with_the_trajectory_advantage_and_weight():
    samples = to_samples(from_row(_row("t"), 0), 0.5, max_seq_len=4, advantage=2.0)
    assert [s.token_ids for s in samples] == [[5, 6, 7, 8], [9, 6, 7, 8]]  # each segment its own sequence
    assert [s.loss_mask for s in samples] == [[0, 1, 1, 1], [0, 1, 1, 1]]
    assert [s.behaviour_logprobs for s in samples] == [[-0.0, -0.5, -0.5, -0.5], [-0.0, -0.5, -0.5, -0.5]]
    assert {(s.advantage, s.weight) for s in samples} == {(2.0, 0.5)}


def test_a_segment_longer_than_max_seq_len_is_trained_in_windows_not_cut():
    samples = to_samples(from_row(_row("t"), 0), 1.0, max_seq_len=3)
    trained = [(s.position_offset + i, s.token_ids[i]) for s in samples for i, m in enumerate(s.loss_mask) if m]
    # every trainable token of both segments (positions within their segment) is trained exactly once
    assert sorted(trained) == sorted([(1, 6), (2, 7), (3, 8), (1, 6), (2, 7), (3, 8)])
    assert all(len(s.token_ids) <= 3 for s in samples)


def test_old_rows_are_one_sample_and_segments_without_trainable_tokens_are_left_out():
    assert [s.token_ids for s in to_samples(from_row(_row("t", starts=None), 0), 1.0, 64)] == [
        [5, 6, 7, 8, 9, 6, 7, 8]]
    observed_only = _row("t", starts=(0, 4, 5)) | {"loss_mask": [0, 1, 1, 1, 0, 0, 0, 0]}
    assert [s.token_ids for s in to_samples(from_row(observed_only, 0), 1.0, 64)] == [[5, 6, 7, 8]]


def test_the_step_token_budget_counts_segments(tmp_path):
    uri = str(tmp_path / "table")
    commit_batch(uri, [_row(f"t{i}") for i in range(5)], "batch-0", 0)
    sizes, trained = step_sizes(uri, micro_batch_tokens=8, accumulation_steps=2)  # two 4-token segments a micro-batch: one trajectory
    assert sizes == [2, 2, 1] and len(trained) == 5
