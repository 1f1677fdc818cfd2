"""The typed trajectory row against the table schema: same columns, a lossless round trip, version checks.

Sampling columns are float32 (as ModelCall.sampling is), so the values here are exact in binary.
"""

from dataclasses import fields

import pytest

from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION, TRAJECTORY_SCHEMA
from liverl.contracts.trajectory_row import SchemaVersionError, TrajectoryRow, rows_to_table, table_to_rows


def _row(**changes) -> TrajectoryRow:
    values = dict(
        trajectory_id="t1", session_id="s1", tenant_id="acme", agent_role="single", agent_id="main",
        batch_id="b1", event_date="2026-12-01", token_ids=[5, 6, 7], loss_mask=[0, 1, 1],
        behaviour_logprobs=[0.0, -0.5, -1.25], span_starts=[0], span_ends=[3], span_policy_versions=["4"],
        span_temperature=[0.75], span_top_p=[0.875], span_top_k=[20], reward_components={"outcome": 1.0},
        first_served_ms=1700000000000,
    )
    values.update(changes)
    return TrajectoryRow(**values)


def test_fields_are_exactly_the_schema_columns():
    assert [f.name for f in fields(TrajectoryRow)] != []
    assert {f.name for f in fields(TrajectoryRow)} == set(TRAJECTORY_SCHEMA.names)


def test_round_trip_through_arrow_is_lossless():
    row = _row()
    table = rows_to_table([row])
    assert table.schema == TRAJECTORY_SCHEMA
    (back,) = table_to_rows(table)
    assert back == row
    assert back.schema_version == TABLE_SCHEMA_VERSION


def test_version_one_rows_read_with_empty_sampling_and_unknown_first_served():
    old = _row().to_arrow()
    for name in ("span_temperature", "span_top_p", "span_top_k", "first_served_ms"):
        old.pop(name)
    old["schema_version"] = 1
    row = TrajectoryRow.from_arrow(old)
    assert row.span_temperature == [] and row.first_served_ms is None


def test_newer_schema_version_is_refused_with_what_to_do():
    newer = _row().to_arrow() | {"schema_version": TABLE_SCHEMA_VERSION + 1}
    with pytest.raises(SchemaVersionError, match="upgrade liverl"):
        TrajectoryRow.from_arrow(newer)


@pytest.mark.parametrize("changes, message", [
    ({"loss_mask": [1, 1]}, "one entry per token"),
    ({"span_top_p": [0.875, 0.875]}, "span_starts"),
    ({"reward_components": {"outcome": float("nan")}}, "non-finite"),
])
def test_validate_names_what_disagrees(changes, message):
    with pytest.raises(ValueError, match=message):
        _row(**changes).validate()


def test_version_two_rows_read_in_clear():
    old = _row().to_arrow()
    for name in ("subject_id", "sealed_token_ids"):
        old.pop(name)
    old["schema_version"] = 2
    row = TrajectoryRow.from_arrow(old).validate()
    assert not row.sealed and row.token_ids == [5, 6, 7]


def test_a_sealed_row_is_validated_once_opened(tmp_path):
    from liverl.privacy.keystore import FileKeyStore
    from liverl.privacy.row_sealing import RowOpener, RowSealer

    store = FileKeyStore(tmp_path)
    sealed = RowSealer(store).seal_row(_row())
    with pytest.raises(ValueError, match="sealed .* open the row first"):
        sealed.validate()
    (back,) = table_to_rows(rows_to_table([sealed]))
    assert back == sealed  # the sealed columns round-trip through Arrow
    assert TrajectoryRow.from_arrow(RowOpener(store).open_row(back.to_arrow())).validate().token_ids == [5, 6, 7]
    uneven = RowSealer(store).seal_row(_row(loss_mask=[1, 1]))
    with pytest.raises(ValueError, match="one entry per token"):
        TrajectoryRow.from_arrow(RowOpener(store).open_row(uneven.to_arrow())).validate()
