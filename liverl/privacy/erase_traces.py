"""Erase a subject's MLflow traces, and scrub the embedded tracking database's free pages.

Traces are found by their tenant tag and kept or deleted by their session tag (liverl.io.traces). SQLite
keeps a deleted row's bytes in free pages until the file is rebuilt, so for the embedded stack's database
(a local SQLite file) the erasure ends with VACUUM and a truncating WAL checkpoint; a production tracking
server's database is the deployment's to scrub.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from liverl.io.traces import TAG_SESSION, TAG_TENANT, TraceStore
from liverl.io.tracking import Tracking
from liverl.privacy.subject import Subject


def erase_traces(tracking_uri: str, experiment: str, subject: Subject) -> int:
    """Delete the subject's traces in the experiment; returns how many were deleted."""
    tracking = Tracking(tracking_uri)
    store = TraceStore(tracking)
    experiment_id = tracking.experiment_id(experiment)
    tenant = subject.tenant.replace("'", "\\'")
    found = store.search(experiment_id, f"tags.`{TAG_TENANT}` = '{tenant}'", max_results=1_000_000)
    doomed = [trace.info.trace_id for trace in found
              if subject.holds(trace.info.tags.get(TAG_TENANT, ""), trace.info.tags.get(TAG_SESSION, ""))]
    return store.delete(experiment_id, doomed) if doomed else 0


def scrub_sqlite(database: Path) -> bool:
    """Rebuild a local SQLite database so deleted rows leave no bytes behind; False when there is none."""
    if not database.exists():
        return False
    connection = sqlite3.connect(database, timeout=60)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("VACUUM")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return True
