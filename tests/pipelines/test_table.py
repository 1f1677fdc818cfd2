"""The Delta commits on their own: one version per batch, app transactions guard against doubles."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from liverl.contracts import names
from liverl.contracts.table_schema import DEAD_LETTER_SCHEMA, TABLE_SCHEMA_VERSION, TRAJECTORY_SCHEMA
from pipelines import table
from pipelines.job import stamp_dead_letter


def _trajectory(batch_id: str) -> pa.Table:
    row = {"trajectory_id": "t", "session_id": "s", "tenant_id": "demo", "agent_role": "single", "agent_id": "main",
           "token_ids": [1, 2], "loss_mask": [0, 1], "behaviour_logprobs": [0.0, -0.5],
           "reward_components": {"outcome": 1.0}, "batch_id": batch_id, "schema_version": 1,
           "event_date": "2026-09-21", "segment_starts": [0]}
    return pa.Table.from_pylist([row], schema=TRAJECTORY_SCHEMA)


def test_commits_carry_metadata_and_are_never_repeated(tmp_path):
    uri, dead_uri = str(tmp_path / "t"), str(tmp_path / "d")
    assert table.read_committed(uri).seq == 0
    version = table.commit_trajectories(uri, _trajectory("b-1"), 1, {names.COMMIT_BATCH_ID: "b-1",
                                                                     names.COMMIT_KAFKA_OFFSETS: '{"ev": {"0": [0, 5]}}',
                                                                     table.COMMIT_DISTILL_STATE: "somewhere"})
    committed = table.read_committed(uri)
    assert (committed.seq, committed.table_version, version) == (1, 0, 0)
    assert committed.next_starts() == {("ev", 0): 5} and committed.state_uri == "somewhere"
    assert committed.metadata[names.COMMIT_SCHEMA_VERSION] == str(TABLE_SCHEMA_VERSION)
    with pytest.raises(RuntimeError, match="already in"):
        table.commit_trajectories(uri, _trajectory("b-1"), 1, {})
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 1

    letter = stamp_dead_letter({"dead_letter_id": "x", "reason": "malformed_event", "message": "m", "session_id": None,
                                "source_topic": "ev", "source_partition": 0, "source_offset": 3, "payload": b""},
                               "b-1", 0)
    letters = pa.Table.from_pylist([letter], schema=DEAD_LETTER_SCHEMA)
    assert table.commit_dead_letters(dead_uri, letters, 1, "b-1")
    assert not table.commit_dead_letters(dead_uri, letters, 1, "b-1")  # the re-run of batch 1
    assert DeltaTable(dead_uri).to_pyarrow_table().num_rows == 1
    assert DeltaTable(dead_uri).transaction_version(names.DISTILL_APP_ID) == 1
