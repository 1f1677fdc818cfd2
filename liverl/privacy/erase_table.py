"""Erase a subject's rows from a Delta table: delete them, rewrite the files that held them, vacuum history.

A Delta delete only writes new files without the rows and marks the old ones removed; time travel still
reads the old files until they are vacuumed. So the old files are vacuumed at once (retention 0): no version
of the table, current or past, can return the rows afterwards (older versions that read those files fail
instead). The delete names rows by an id that holds no personal data (the trajectory or dead-letter id, a
hash), because Delta records the predicate in the table's log.

The log's column statistics would quote the deleted rows too (min/max of session_id, task_id, ...): the
pipelines create both tables with statistics only for columns that name no one (pipelines/table.py). Commits
written before that may still hold them; the log is history the trainer and lineage follow, so it is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from liverl.privacy.subject import Subject


@dataclass(frozen=True)
class TableErasure:
    rows: int = 0  # rows deleted
    files_removed: int = 0  # data files the vacuum deleted (the old ones and any other unreferenced file)
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
    doomed = [row for row in rows if holds_row(subject, row["tenant_id"], row["session_id"])]
    if doomed:
        ids = sorted({row[id_column] for row in doomed})
        for start in range(0, len(ids), 500):  # bounded predicates
            chunk = ", ".join(_quoted(value) for value in ids[start:start + 500])
            table.delete(f"{id_column} IN ({chunk})")
    return TableErasure(len(doomed), vacuum_counted(table), frozenset(row["batch_id"] for row in doomed))


def holds_row(subject: Subject, tenant: str | None, session_id: str | None) -> bool:
    """Whether a row of (tenant, session id as stored) is the subject's. A dead letter of a record whose body did
    not read stores the record's key as its session id: "<tenant>/<session>", or "<tenant>/<subject id>" for a
    sealed record (liverl.privacy.sealing re-keys it so), which then names no session at all."""
    if subject.holds(tenant, session_id):
        return True
    key_tenant, slash, rest = (session_id or "").partition("/")
    if not slash or key_tenant != subject.tenant or tenant not in (None, key_tenant):
        return False
    return subject.holds(key_tenant, rest) or rest in subject.sessions


def vacuum_counted(table, retention_hours: int = 0) -> int:
    """Vacuum the files the table stopped referencing over retention_hours ago (0: every one); returns how many
    it deleted.

    Not len(vacuum()): delta-rs lists every file a remove action of the current snapshot names, whether or not
    an earlier vacuum deleted it already (as an absolute path then), so each erasure would count again the files
    of the erasures before it. Only the files present before the vacuum and gone after it count."""
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(_absolute(table.table_uri))
    listed = table.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False)
    present = [path for path in {_within(root, p) for p in listed}
               if fs.get_file_info(path).type != pafs.FileType.NotFound]
    table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
    return sum(fs.get_file_info(path).type == pafs.FileType.NotFound for path in present)


def _within(root: str, path: str) -> str:
    """A path vacuum reported (relative to the table, or absolute) as a path of the table's filesystem."""
    path = path.split("://", 1)[-1] if "://" in path else path
    return path if path.startswith(root.rstrip("/") + "/") else f"{root.rstrip('/')}/{path.lstrip('/')}"


def _absolute(uri: str) -> str:
    import os

    return uri if "://" in uri else os.path.abspath(uri)


def _quoted(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
