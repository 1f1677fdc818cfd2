"""Read the trajectory table's history: its commits, each commit's batch and Kafka offsets, its rows.

The pipelines commit one batch per Delta version, with the batch id and the Kafka offsets it covers
in the commit metadata (docs/architecture.md, contract 3). The trainer follows these commits; audits and
reports read them back. A table that does not exist yet reads as empty, never as an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from liverl.contracts import names
from liverl.io.lineage import KafkaOffsets, decode_offsets


@dataclass(frozen=True)
class TableCommit:
    """One committed table version as the pipelines wrote it: one batch per commit."""

    version: int
    batch_id: str | None  # None for commits that add no batch (optimize, vacuum, schema changes)
    kafka_offsets: KafkaOffsets = field(default_factory=dict)
    timestamp_ms: int = 0
    added_rows: int | None = 0  # from Delta's operation metrics; None when the writer recorded none


class TableHistory:
    """The Delta table at `uri`, read commit by commit (each call sees the newest committed state)."""

    def __init__(self, uri: str):
        self.uri = uri

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri)

    def latest_version(self) -> int | None:
        """The newest committed version, or None while the table does not exist yet."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri).version() if self.exists() else None

    def commits_after(self, version: int = -1) -> list[TableCommit]:
        """Commits newer than `version` (-1: all), oldest first."""
        from deltalake import DeltaTable

        if not self.exists():
            return []
        table = DeltaTable(self.uri)
        if table.version() <= version:
            return []
        entries = table.history(limit=table.version() - version)  # newest first
        return sorted((_commit(entry) for entry in entries if entry["version"] > version), key=lambda c: c.version)

    def rows_added(self, commit: TableCommit) -> list[dict]:
        """The rows `commit` added, sorted by trajectory_id so that a cursor into them survives restarts."""
        if commit.batch_id is None:
            return []
        return sorted(self.batch_rows(commit.batch_id, version=commit.version), key=lambda row: row["trajectory_id"])

    def batch_rows(self, batch_id: str, version: int | None = None, columns: Sequence[str] | None = None) -> list[dict]:
        """The rows of batch `batch_id` in the snapshot at `version` (None: the latest)."""
        import pyarrow.dataset as ds

        return self._rows(version, columns, ds.field("batch_id") == batch_id)

    def rows_up_to(self, version: int | None = None, columns: Sequence[str] | None = None) -> list[dict]:
        """Every row of the snapshot at `version` (None: the latest; -1 or no table: none)."""
        if version is not None and version < 0:
            return []
        return self._rows(version, columns, None)

    def _rows(self, version: int | None, columns: Sequence[str] | None, row_filter) -> list[dict]:
        from deltalake import DeltaTable

        if not self.exists():
            return []
        dataset = DeltaTable(self.uri, version=version).to_pyarrow_dataset()
        return dataset.to_table(columns=list(columns) if columns else None, filter=row_filter).to_pylist()


def _commit(entry: dict) -> TableCommit:
    version = int(entry["version"])
    return TableCommit(
        version=version,
        batch_id=entry.get(names.COMMIT_BATCH_ID) or None,
        kafka_offsets=decode_offsets(entry.get(names.COMMIT_KAFKA_OFFSETS),
                                     f"commit metadata {names.COMMIT_KAFKA_OFFSETS} of table version {version}"),
        timestamp_ms=int(entry.get("timestamp") or 0),
        added_rows=_added_rows(entry.get("operationMetrics") or {}),
    )


def _added_rows(metrics: dict) -> int | None:
    """The rows a commit added, or None when its writer recorded no count: the pipelines commit progress (Kafka
    offsets) with 0 rows while sessions are still open, which is a count of 0, not an unknown one."""
    count = metrics.get("num_added_rows")
    return None if count is None else int(count)
