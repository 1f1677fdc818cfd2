"""Erase a subject's rows from a Delta table: delete them, rewrite the files that held them, vacuum history.

A Delta delete only writes new files without the rows and marks the old ones removed; time travel still
reads the old files until they are vacuumed. So the old files are vacuumed at once (retention 0): no version
of the table, current or past, can return the rows afterwards (older versions that read those files fail
instead). The delete names rows by an id that holds no personal data (the trajectory or dead-letter id, a
hash), because Delta records the predicate in the table's log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from liverl.privacy.subject import Subject


@dataclass(frozen=True)
class TableErasure:
    rows: int = 0  # rows deleted
    files_removed: int = 0  # data files vacuumed (the old ones and any other unreferenced file)
    batch_ids: frozenset[str] = field(default_factory=frozenset)  # the batches that had committed them


def erase_rows(uri: str | None, subject: Subject, id_column: str) -> TableErasure:
    """Delete the subject's rows of the table at uri (rows are matched on tenant_id and session_id; id_column
    names them in the delete) and vacuum every file no longer referenced; an absent table erases nothing."""
    from deltalake import DeltaTable

    if not uri or not DeltaTable.is_deltatable(uri):
        return TableErasure()
    table = DeltaTable(uri)
    columns = [id_column, "tenant_id", "session_id", "batch_id"]
    rows = table.to_pyarrow_dataset().to_table(columns=columns).to_pylist()
    doomed = [row for row in rows if subject.holds(row["tenant_id"], row["session_id"])]
    if doomed:
        ids = sorted({row[id_column] for row in doomed})
        for start in range(0, len(ids), 500):  # bounded predicates
            chunk = ", ".join(_quoted(value) for value in ids[start:start + 500])
            table.delete(f"{id_column} IN ({chunk})")
    removed = table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    return TableErasure(len(doomed), len(removed), frozenset(row["batch_id"] for row in doomed))


def _quoted(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
