"""Erase sessions from the distiller's staged trace sources (`liverl forget`).

Each batch stages its sampled sessions' events and model calls (`trace_sources-*.parquet`, pipelines/traces.py)
for the audit that traces them after the commit; they hold the sessions' (redacted) text. A file that holds an
erased session is rewritten without it (a new file moved over the old one), so no staged copy survives.
"""

from __future__ import annotations

from collections.abc import Callable

from pipelines.traces import STAGED_NAME, TRACE_SOURCE_SCHEMA


def erase_staged_sessions(state_uri: str, holds: Callable[[str, str], bool]) -> int:
    """Drop every staged session for which holds(tenant_id, session_id) is true, under state_uri's batches;
    returns how many sessions were dropped."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, root = pafs.FileSystem.from_uri(state_uri.rstrip("/") + "/batches")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    dropped = 0
    for info in infos:
        if not (info.base_name.startswith(STAGED_NAME + "-") and info.base_name.endswith(".parquet")):
            continue
        table = pq.read_table(info.path, filesystem=fs, schema=TRACE_SOURCE_SCHEMA)
        keep = [not holds(t, s) for t, s in zip(table.column("tenant_id").to_pylist(),
                                                 table.column("session_id").to_pylist())]
        if all(keep):
            continue
        dropped += keep.count(False)
        temporary = f"{info.path}.erasing"
        pq.write_table(table.filter(keep), temporary, filesystem=fs)
        fs.move(temporary, info.path)
    return dropped
