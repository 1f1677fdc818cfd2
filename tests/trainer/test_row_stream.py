"""Reading the table commit by commit, and the step builder's filters on real Delta commits."""

from __future__ import annotations

from liverl.config.trainer import TrainerConfig
from liverl.io.lineage import merge_offsets
from liverl.io.table_history import TableHistory
from tests.trainer.conftest import commit_batch, make_row, step_sizes
from trainer.io.row_stream import RowStream, StreamPosition
from trainer.step.builder import build_step


def _row(tid: str, **kwargs) -> dict:
    return make_row(tid, "", [5, 6, 7, 8], [0, 1, 1, 1], [0.0, -1.0, -1.0, -1.0], **kwargs)


def test_commits_carry_their_batch_and_offsets_and_rows_come_sorted(tmp_path):
    uri = str(tmp_path / "table")
    follower = TableHistory(uri)
    assert follower.latest_version() is None and follower.commits_after(-1) == []
    commit_batch(uri, [_row("b"), _row("a")], "batch-0", 0, {"events": {"0": [0, 5]}})
    commit_batch(uri, [_row("c")], "batch-1", 1, {"events": {"0": [5, 9], "1": [0, 2]}})
    commits = follower.commits_after(-1)
    assert [(c.version, c.batch_id) for c in commits] == [(0, "batch-0"), (1, "batch-1")]
    assert [r["trajectory_id"] for r in follower.rows_added(commits[0])] == ["a", "b"]
    assert [r["trajectory_id"] for r in follower.rows_added(commits[1])] == ["c"]
    assert follower.commits_after(0) == commits[1:]
    assert merge_offsets([c.kafka_offsets for c in commits]) == {"events": {"0": [0, 9], "1": [0, 2]}}


def test_stream_resumes_inside_a_version(tmp_path):
    uri = str(tmp_path / "table")
    commit_batch(uri, [_row("a"), _row("b"), _row("c")], "batch-0", 0)
    commit_batch(uri, [_row("d")], "batch-1", 1)
    stream = RowStream(TableHistory(uri), StreamPosition(0, 2, False))
    seen = []
    while (item := stream.peek()) is not None:
        seen.append(item[1]["trajectory_id"])
        stream.advance()
    assert seen == ["c", "d"] and stream.position == StreamPosition(1, 1, True)


def test_step_builder_filters_and_never_trains_a_recommitted_trajectory(tmp_path):
    uri = str(tmp_path / "table")
    fresh = {"policy_versions": ("4",)}
    commit_batch(uri, [_row("fresh-1", **fresh), _row("old", policy_versions=("1",)),
                       _row("frozen", agent_role="subagent", **fresh) | {"loss_mask": [0, 0, 0, 0]},
                       _row("broken", **fresh) | {"loss_mask": [0, 1]},
                       _row("future", **fresh) | {"schema_version": 99}], "batch-0", 0)
    commit_batch(uri, [_row("fresh-1", **fresh), _row("fresh-2", **fresh)], "batch-1", 1)  # fresh-1 again
    config = TrainerConfig()
    config.gate.holdout_fraction = 0.0
    config.staleness.max_version_lag = 3
    stream = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    lines: list[str] = []
    plan = build_step(stream, {}, "5", 0, config, say=lines.append)
    assert [t.trajectory_id for t in plan.trajectories] == ["fresh-1", "fresh-2"]
    assert dict(plan.skipped) == {"invalid": 2, "no_trainable_tokens": 1, "stale": 1, "already_trained": 1}
    assert sorted(plan.lags) == [1, 1, 4]  # the staleness distribution includes the dropped row
    assert any("broken" in line and "one entry per token" in line for line in lines)
    assert any("future" in line and "upgrade liverl" in line for line in lines)
    assert sorted(plan.commits) == [0, 1] and stream.peek() is None


def test_step_builder_fills_at_most_the_accumulation_steps_token_budget(tmp_path):
    uri = str(tmp_path / "table")
    commit_batch(uri, [_row(f"t{i}") for i in range(10)], "batch-0", 0)
    sizes, trained = step_sizes(uri, micro_batch_tokens=8, accumulation_steps=2)  # two 4-token trajectories a micro-batch
    assert sizes == [4, 4, 2] and len(trained) == 10


def test_pending_rows_counts_what_is_committed_and_not_consumed(tmp_path):
    """What trainer.min_step_rows waits on: rows of commits not read yet, and the rest of the current one."""
    uri = str(tmp_path / "table")
    stream = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    assert stream.pending_rows() == 0
    commit_batch(uri, [_row("a"), _row("b")], "batch-0", 0)
    commit_batch(uri, [_row("c")], "batch-1", 1)
    assert stream.pending_rows() == 3
    stream.peek()
    stream.advance()
    assert stream.pending_rows() == 2
    commit_batch(uri, [_row("d"), _row("e")], "batch-2", 2)
    assert stream.pending_rows() == 4
    seen = []
    while (item := stream.peek()) is not None:
        seen.append(item[1]["trajectory_id"])
        stream.advance()
    assert seen == ["b", "c", "d", "e"] and stream.pending_rows() == 0


def test_a_progress_commit_with_no_rows_counts_as_none_pending(tmp_path):
    """The pipelines commit their Kafka offsets with 0 rows while sessions are still open; those commits must not
    read as "unknown, plenty": that started a step on every one of them, with 1 or 2 trajectories."""
    uri = str(tmp_path / "table")
    stream = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    commit_batch(uri, [_row("a")], "batch-0", 0)
    commit_batch(uri, [], "batch-1", 1)
    commit_batch(uri, [], "batch-2", 2)
    assert stream.pending_rows() == 1
