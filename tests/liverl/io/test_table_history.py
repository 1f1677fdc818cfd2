"""The table history reader on a real Delta table written with deltalake, commit metadata included."""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

from liverl.contracts import names
from liverl.io.table_history import TableCommit, TableHistory


def _commit(uri: str, trajectory_ids: list[str], batch_id: str | None, offsets: dict | None = None) -> None:
    rows = pa.table({"trajectory_id": trajectory_ids, "session_id": [f"s-{t}" for t in trajectory_ids],
                     "batch_id": [batch_id or ""] * len(trajectory_ids)})
    metadata = {} if batch_id is None else {names.COMMIT_BATCH_ID: batch_id,
                                            names.COMMIT_KAFKA_OFFSETS: json.dumps(offsets or {})}
    write_deltalake(uri, rows, mode="append", commit_properties=CommitProperties(custom_metadata=metadata))


def test_a_table_that_does_not_exist_yet_reads_as_empty(tmp_path):
    history = TableHistory(str(tmp_path / "none"))
    assert history.latest_version() is None and history.commits_after(-1) == []
    assert history.rows_up_to() == [] and history.batch_rows("b") == []


def test_commits_carry_batch_offsets_and_counts_and_their_rows(tmp_path):
    uri = str(tmp_path / "table")
    history = TableHistory(uri)
    _commit(uri, ["b", "a"], "batch-0", {"events": {"0": [0, 5]}})
    _commit(uri, ["c"], None)  # a commit that adds no batch (a tool, a repair)
    _commit(uri, ["e", "d"], "batch-1", {"events": {"0": [5, 9], "1": [0, 2]}})

    assert history.latest_version() == 2
    commits = history.commits_after(-1)
    assert [(c.version, c.batch_id, c.added_rows) for c in commits] == [(0, "batch-0", 2), (1, None, 1),
                                                                         (2, "batch-1", 2)]
    assert commits[2].kafka_offsets == {"events": {"0": [5, 9], "1": [0, 2]}}
    assert commits[0].timestamp_ms <= commits[2].timestamp_ms and commits[0].timestamp_ms > 0
    assert history.commits_after(1) == commits[2:] and history.commits_after(2) == []

    assert [r["trajectory_id"] for r in history.rows_added(commits[0])] == ["a", "b"]  # sorted: a stable cursor
    assert history.rows_added(commits[1]) == []
    assert [r["trajectory_id"] for r in history.rows_added(commits[2])] == ["d", "e"]
    assert sorted(r["trajectory_id"] for r in history.rows_up_to(1)) == ["a", "b", "c"]
    assert history.rows_up_to(-1) == []
    assert {r["session_id"] for r in history.rows_up_to(columns=["session_id"])} == {"s-a", "s-b", "s-c", "s-d", "s-e"}
    assert sorted(r["trajectory_id"] for r in history.batch_rows("batch-1")) == ["d", "e"]


def test_a_commit_reads_back_equal_to_what_was_written(tmp_path):
    uri = str(tmp_path / "table")
    _commit(uri, ["a"], "batch-0", {"events": {"0": [0, 1]}})
    [commit] = TableHistory(uri).commits_after(-1)
    assert commit == TableCommit(0, "batch-0", {"events": {"0": [0, 1]}}, commit.timestamp_ms, 1)
