"""Read back, from the registry and the table alone, what each policy version was trained on.

This is the audit a person would do: a version's lineage tags name table versions; the table's
commits name their batches; the rows of those batches name the sessions. A version also inherits
everything its parent was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from liverl.io import lineage as codec
from liverl.io.lineage import KafkaOffsets
from liverl.io.registry import ModelRegistry
from liverl.io.table_history import TableHistory


@dataclass
class VersionLineage:
    version: str
    parent: str  # "" for a base policy
    created_ms: int
    table_versions: list[int]
    kafka_offsets: KafkaOffsets
    tags: dict[str, str]
    own_sessions: set[str] = field(default_factory=set)  # sessions in the table versions it trained on itself
    all_sessions: set[str] = field(default_factory=set)  # its own and every ancestor's


@dataclass(frozen=True)
class TableSessions:
    """One read of the trajectory table: when each commit was written and the session ids of the rows it added."""

    commit_s: dict[int, float]  # table version -> unix s
    sessions_by_version: dict[int, set[str]]  # table version -> session ids (one commit = one batch)


def read_table_sessions(table_uri: str) -> TableSessions:
    """The table's commits, read once, and its rows at the newest of them. The pipelines keep committing while the
    demo's summary reads, so a second read of either could name a version the first never saw."""
    history = TableHistory(table_uri)
    commits = history.commits_after(-1)
    if not commits:
        return TableSessions({}, {})
    sessions_by_batch: dict[str, set[str]] = {}
    for row in history.rows_up_to(version=commits[-1].version, columns=["batch_id", "session_id"]):
        sessions_by_batch.setdefault(row["batch_id"], set()).add(row["session_id"])
    return TableSessions({commit.version: commit.timestamp_ms / 1000 for commit in commits},
                         {commit.version: sessions_by_batch.get(commit.batch_id, set())
                          for commit in commits if commit.batch_id})


def read_lineage(tracking_uri: str, model_name: str, table: TableSessions) -> dict[str, VersionLineage]:
    """Every registered version with the session ids it (and its ancestors) trained on."""
    lineages: dict[str, VersionLineage] = {}
    for mv in ModelRegistry(tracking_uri, model_name).versions():
        decoded = codec.decode(mv.tags)
        lineages[mv.version] = VersionLineage(
            version=mv.version, parent=decoded.parent_version or "", created_ms=mv.created_ms,
            table_versions=list(decoded.table_versions), kafka_offsets=decoded.kafka_offsets, tags=mv.tags,
        )
    for lineage in lineages.values():
        for table_version in lineage.table_versions:
            lineage.own_sessions |= table.sessions_by_version.get(table_version, set())
    for lineage in lineages.values():
        seen, cursor = set(), lineage
        while cursor is not None and cursor.version not in seen:
            seen.add(cursor.version)
            lineage.all_sessions |= cursor.own_sessions
            cursor = lineages.get(cursor.parent)
    return lineages


def committed_at(table: TableSessions) -> dict[str, float]:
    """session id -> when (unix s) the first commit holding its rows was written."""
    first: dict[str, float] = {}
    for version, sessions in sorted(table.sessions_by_version.items()):
        for session_id in sessions:
            first.setdefault(session_id, table.commit_s[version])
    return first
