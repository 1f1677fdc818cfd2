"""The table as one ordered stream of rows with a restartable position (table version, cursor).

Within a version rows are sorted by trajectory_id (and repeated `passes` times), so the same
position means the same next row in every run: that is what makes resume free of gaps and repeats.
A stream may keep only some rows (`keep`, e.g. one tenant group's): its cursor then counts the rows it keeps,
the same in every run as long as `keep` is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from liverl.io.table_history import TableCommit, TableHistory


@dataclass(frozen=True)
class StreamPosition:
    table_version: int  # -1: before the first commit
    cursor: int  # rows of table_version consumed
    done: bool  # table_version fully consumed


class RowStream:
    def __init__(self, follower: TableHistory, position: StreamPosition, passes: int = 1,
                 keep: Callable[[dict], bool] | None = None):
        self.follower = follower
        self.passes = passes
        self.keep = keep
        self.commit: TableCommit | None = None
        self.rows: list[dict] = []
        self.version, self.cursor, self.done = position.table_version, position.cursor, position.done
        self._queued: list[TableCommit] = []
        if not self.done:  # resume inside a version: reload its rows
            for commit in follower.commits_after(self.version - 1):
                if commit.version == self.version:
                    self._load(commit, self.cursor)

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(self.version, self.cursor, self.done)

    def peek(self) -> tuple[TableCommit, dict] | None:
        """The next row and its commit, or None when the table has nothing newer (yet)."""
        while self.done or self.cursor >= len(self.rows):
            self.done = True
            if not self._queued:
                self._queued = self.follower.commits_after(self.version)
                if not self._queued:
                    return None
            self._load(self._queued.pop(0), 0)
        return self.commit, self.rows[self.cursor]

    def pending_rows(self) -> int:
        """Rows committed and not consumed yet (a commit whose writer recorded no row count counts as plenty)."""
        last = self._queued[-1].version if self._queued else self.version
        self._queued += self.follower.commits_after(last)
        unknown = any(c.batch_id is not None and c.added_rows is None for c in self._queued)
        current = 0 if self.done else len(self.rows) - self.cursor
        return 1 << 30 if unknown else current + sum((c.added_rows or 0) * self.passes for c in self._queued)

    def advance(self) -> None:
        self.cursor += 1
        if self.cursor >= len(self.rows):
            self.done = True

    def _load(self, commit: TableCommit, cursor: int) -> None:
        self.commit = commit
        rows = self.follower.rows_added(commit)
        self.rows = (rows if self.keep is None else [row for row in rows if self.keep(row)]) * self.passes
        self.version, self.cursor = commit.version, cursor
        self.done = cursor >= len(self.rows)
