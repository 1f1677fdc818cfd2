"""Follow the trajectory table commit by commit: what each version added and which Kafka offsets it covers.

The reading itself is the shared table history reader (liverl.io.table_history); these are the names
the trainer's row stream, step builder and gate use.
"""

from __future__ import annotations

from liverl.io.lineage import merge_offsets
from liverl.io.table_history import TableCommit, TableHistory

__all__ = ["TableCommit", "TableFollower", "merge_offsets"]


class TableFollower(TableHistory):
    """The trajectory table as the trainer follows it: commits_after, rows_added, rows_up_to, latest_version."""
