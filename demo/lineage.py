"""Read back, from the registry and the table alone, what each policy version was trained on.

This is the audit a person would do: a version's lineage tags name table versions; the table's
commits name their batches; the rows of those batches name the sessions. A version also inherits
everything its parent was trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from liverl.contracts import names


@dataclass
class VersionLineage:
    version: str
    parent: str
    created_ms: int
    table_versions: list[int]
    kafka_offsets: dict
    tags: dict[str, str]
    own_sessions: set[str] = field(default_factory=set)  # sessions in the table versions it trained on itself
    all_sessions: set[str] = field(default_factory=set)  # its own and every ancestor's


def read_lineage(tracking_uri: str, model_name: str, table_uri: str) -> dict[str, VersionLineage]:
    """Every registered version with the session ids it (and its ancestors) trained on."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    lineages: dict[str, VersionLineage] = {}
    for mv in client.search_model_versions(f"name='{model_name}'"):
        tags = dict(mv.tags or {})
        lineages[str(mv.version)] = VersionLineage(
            version=str(mv.version),
            parent=tags.get(names.TAG_PARENT_VERSION, ""),
            created_ms=int(mv.creation_timestamp or 0),
            table_versions=[int(v) for v in json.loads(tags.get(names.TAG_TABLE_VERSIONS, "[]") or "[]")],
            kafka_offsets=json.loads(tags.get(names.TAG_KAFKA_OFFSETS, "{}") or "{}"),
            tags=tags,
        )
    sessions_by_table_version = _sessions_by_table_version(table_uri)
    for lineage in lineages.values():
        for table_version in lineage.table_versions:
            lineage.own_sessions |= sessions_by_table_version.get(table_version, set())
    for lineage in lineages.values():
        seen, cursor = set(), lineage
        while cursor is not None and cursor.version not in seen:
            seen.add(cursor.version)
            lineage.all_sessions |= cursor.own_sessions
            cursor = lineages.get(cursor.parent)
    return lineages


def _sessions_by_table_version(table_uri: str) -> dict[int, set[str]]:
    """table version -> session ids of the rows that commit added (one commit = one batch)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(table_uri)
    except TableNotFoundError:
        return {}
    batch_of_version: dict[int, str] = {}
    for commit in table.history():
        batch_id = commit.get(names.COMMIT_BATCH_ID)
        if batch_id:
            batch_of_version[int(commit["version"])] = batch_id
    rows = table.to_pyarrow_table(columns=["batch_id", "session_id"]).to_pylist()
    sessions_by_batch: dict[str, set[str]] = {}
    for row in rows:
        sessions_by_batch.setdefault(row["batch_id"], set()).add(row["session_id"])
    return {version: sessions_by_batch.get(batch, set()) for version, batch in batch_of_version.items()}
