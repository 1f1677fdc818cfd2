"""The trajectory and dead-letter Delta tables: what was committed last, and the exactly-once commit.

Every batch is one Delta version of the trajectory table carrying its Kafka offsets, its batch id, the
table schema version and the Delta app transaction (names.DISTILL_APP_ID, version = batch seq). The
dead-letter table gets the same app transaction first. Before writing either table the distiller asks
the table for its app-transaction version, so a batch already in a table is never written twice: a
crash anywhere, followed by a re-run of the same plan, yields every row exactly once.

Neither table keeps column statistics of what names a person or holds their text: a Delta log keeps every
commit's min/max values for good (the trainer and lineage follow that history, so it is never deleted), and
after `liverl forget` deletes a row the old commits would still quote its session id, task id or message. Only
the columns in *_STATS_COLUMNS get statistics (delta.dataSkippingStatsColumns): the batch id, which readers filter
on (TableHistory.batch_rows), and numbers that say nothing about a session. Other filters still work, they
read every file's column instead of skipping files. A column added later gets no statistics unless named here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from liverl.contracts import names
from liverl.contracts.table_schema import (
    DEAD_LETTER_SCHEMA,
    TABLE_SCHEMA_VERSION,
    TRAJECTORY_PARTITION_BY,
    TRAJECTORY_SCHEMA,
)

# Pipelines-private commit metadata (the trainer needs none of it).
COMMIT_DISTILL_STATE = "liverl.distill.state"  # staging folder holding the pending + closed files
COMMIT_DISTILL_SUMMARY = "liverl.distill.summary"  # JSON counts of the batch (what the audit shows)
COMMIT_BATCH_SEQ = "liverl.distill.seq"
COMMIT_REWARD_CONFIG_VERSION = "liverl.reward_config_version"

# Columns whose min/max values the Delta log may keep (none of them names a session, a user or their text):
# the batch id and the batch's clock, the same on every row of a batch.
STATS_PROPERTY = "delta.dataSkippingStatsColumns"
TRAJECTORY_STATS_COLUMNS = ("batch_id", "schema_version", "distilled_at_ms")
DEAD_LETTER_STATS_COLUMNS = ("batch_id", "recorded_at_ms")


@dataclass(frozen=True)
class Committed:
    """The trajectory table as the distiller needs it: the last batch and where to resume."""

    seq: int  # 0: nothing committed yet
    table_version: int | None
    metadata: dict  # custom metadata of the last batch's commit ({} when none)

    def next_starts(self) -> dict[tuple[str, int], int]:
        offsets = json.loads(self.metadata.get(names.COMMIT_KAFKA_OFFSETS, "{}"))
        return {(topic, int(partition)): span[1] for topic, parts in offsets.items()
                for partition, span in parts.items()}

    @property
    def state_uri(self) -> str | None:
        return self.metadata.get(COMMIT_DISTILL_STATE)


def read_committed(trajectories_uri: str) -> Committed:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(trajectories_uri):
        return Committed(0, None, {})
    table = DeltaTable(trajectories_uri)
    seq = table.transaction_version(names.DISTILL_APP_ID) or 0
    if seq == 0:
        return Committed(0, table.version(), {})
    return Committed(seq, table.version(), batch_commit(table, seq))


def batch_commit(table, seq: int) -> dict:
    """The commit info of batch `seq` (newest commits first; a batch is always found near the head)."""
    for limit in (20, None):
        for entry in table.history(limit):
            if entry.get(COMMIT_BATCH_SEQ) == str(seq):
                return entry
    raise RuntimeError(f"the trajectory table has app transaction {seq} but no commit with its metadata; "
                       "was it written by another tool? Restore the table or set a new pipelines.consumer_group")


def app_version(uri: str) -> int:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return 0
    return DeltaTable(uri).transaction_version(names.DISTILL_APP_ID) or 0


Rows = pa.Table | pa.RecordBatchReader  # a reader streams the staged files: the driver never holds a whole batch


def commit_dead_letters(uri: str, rows: Rows, seq: int, batch_id: str) -> bool:
    """Append the batch's dead letters unless this batch already did; True when written (callers skip empty ones)."""
    if app_version(uri) >= seq:
        return False
    _write(uri, rows.cast(DEAD_LETTER_SCHEMA), seq, {names.COMMIT_BATCH_ID: batch_id, COMMIT_BATCH_SEQ: str(seq)},
           DEAD_LETTER_STATS_COLUMNS)
    return True


def commit_trajectories(uri: str, rows: Rows, seq: int, metadata: dict) -> int:
    """Append the batch's trajectories with its offsets, as one Delta version; returns that version."""
    from deltalake import DeltaTable

    if app_version(uri) >= seq:
        raise RuntimeError(f"batch {seq} is already in {uri}: another distiller with the same "
                           "pipelines.consumer_group is running; run one per table")
    _write(uri, rows.cast(TRAJECTORY_SCHEMA),
           seq, metadata | {COMMIT_BATCH_SEQ: str(seq), names.COMMIT_SCHEMA_VERSION: str(TABLE_SCHEMA_VERSION)},
           TRAJECTORY_STATS_COLUMNS)
    return DeltaTable(uri).version()


def _write(uri: str, rows: Rows, seq: int, metadata: dict, stats_columns: tuple[str, ...]) -> None:
    from deltalake import CommitProperties, Transaction, write_deltalake

    properties = {STATS_PROPERTY: ",".join(stats_columns)}
    limit_statistics(uri, properties)
    # "merge": a table written under an older schema version gains the additive columns instead of refusing.
    # `configuration` applies when this write creates the table (an existing table ignores it).
    write_deltalake(uri, rows, mode="append", partition_by=TRAJECTORY_PARTITION_BY, schema_mode="merge",
                    configuration=properties, commit_properties=CommitProperties(
                        custom_metadata=metadata,
                        app_transactions=[Transaction(app_id=names.DISTILL_APP_ID, version=seq)]))


def limit_statistics(uri: str, properties: dict[str, str]) -> None:
    """Give a table created before its *_STATS_COLUMNS existed the property, in a commit of its own (SET TBLPROPERTIES,
    no batch), so its later commits carry no statistics of other columns. Its older commits' JSON (and any
    checkpoint written before) may still hold min/max values of ids and text: Delta never rewrites a commit."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return  # the write creates it, with the property
    table = DeltaTable(uri)
    if any(table.metadata().configuration.get(name) != value for name, value in properties.items()):
        table.alter.set_table_properties(properties)
