"""Follow the trajectory table commit by commit: what each version added and which Kafka offsets it covers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from liverl.contracts import names


@dataclass(frozen=True)
class TableCommit:
    """One committed table version as the pipelines wrote it (contract 4): one batch per commit."""

    version: int
    batch_id: str | None  # None for commits that add no batch (optimize, vacuum, schema changes)
    kafka_offsets: dict = field(default_factory=dict)  # {topic: {partition: [first, end_exclusive]}}


class TableFollower:
    def __init__(self, uri: str):
        self.uri = uri

    def latest_version(self) -> int | None:
        """The newest committed version, or None while the table does not exist yet."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.uri):
            return None
        return DeltaTable(self.uri).version()

    def commits_after(self, version: int) -> list[TableCommit]:
        """Commits newer than `version` (-1: all), oldest first."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.uri):
            return []
        table = DeltaTable(self.uri)
        if table.version() <= version:
            return []
        commits = []
        for entry in table.history(limit=table.version() - version):
            if entry["version"] <= version:
                continue
            offsets = entry.get(names.COMMIT_KAFKA_OFFSETS)
            commits.append(
                TableCommit(
                    version=entry["version"],
                    batch_id=entry.get(names.COMMIT_BATCH_ID),
                    kafka_offsets=json.loads(offsets) if offsets else {},
                )
            )
        return sorted(commits, key=lambda commit: commit.version)

    def rows_added(self, commit: TableCommit) -> list[dict]:
        """The rows `commit` added, sorted by trajectory_id so that a cursor into them survives restarts."""
        import pyarrow.dataset as ds
        from deltalake import DeltaTable

        if commit.batch_id is None:
            return []
        dataset = DeltaTable(self.uri, version=commit.version).to_pyarrow_dataset()
        rows = dataset.to_table(filter=ds.field("batch_id") == commit.batch_id).to_pylist()
        return sorted(rows, key=lambda row: row["trajectory_id"])

    def rows_up_to(self, version: int) -> list[dict]:
        """Every row of the snapshot at `version` (the gate reads its held-out trajectories from here)."""
        from deltalake import DeltaTable

        if version < 0 or not DeltaTable.is_deltatable(self.uri):
            return []
        return DeltaTable(self.uri, version=version).to_pyarrow_dataset().to_table().to_pylist()


def merge_offsets(ranges: list[dict]) -> dict:
    """Union of {topic: {partition: [first, end]}} ranges into one covering range per partition."""
    merged: dict[str, dict[str, list[int]]] = {}
    for offsets in ranges:
        for topic, partitions in offsets.items():
            for partition, (first, end) in partitions.items():
                current = merged.setdefault(topic, {}).get(str(partition))
                merged[topic][str(partition)] = (
                    [first, end] if current is None else [min(current[0], first), max(current[1], end)]
                )
    return merged
