"""Which sessions the capture service has seen open and closed, kept durable next to the spool.

Rules (ingest.enforce_sessions):
- session_start opens a session; session_end closes it and remembers the end's sequence number.
- An event of a session whose start was not seen is rejected (unknown_session), except:
  - while the start may still be in flight: the event is numbered after it (sequence > 0; the SDK numbers
    a session 0, 1, 2, ... from its start) and the session's first event came less than
    session_start_grace_s ago (concurrent requests, retries and replicas reorder; order is restored
    downstream from the sequence numbers);
  - when this state is younger than the event: a restarted service keeps its state (SQLite in the spool
    folder), but a fresh state folder, or one whose replica ring changed (`scope`), cannot know sessions
    that began before, so those are let through.
- After the close, feedback and outcomes are accepted for late_event_horizon_s (they arrive late on
  purpose); any other event is rejected (closed_session) unless its sequence is not past the end's,
  which is a retry or a reordering of something that happened before the close.

Scale-out: the state is partitioned, not shared. Each session is owned by one capture replica (a
rendezvous hash of tenant/session over ingest.replicas, ingest/routing.py); a replica forwards events of
sessions it does not own to their owner, so this registry, the (tenant, event id) de-duplication window
and a session's order in Kafka all live in one process per session, and the rules above hold across
replicas exactly as on one. Chosen over a store all replicas share (a network round trip and an extra
system on every event, and a race on each (tenant, event id) unless it locks) and over state derived
from Kafka (every replica would read every event, which does not scale out, and could not de-duplicate
two copies in flight at once). The cost is one hop for the events a load balancer sends elsewhere, and
a ring change moves the sessions of one replica's share (handled as a fresh state, above).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ingest.validation import LATE_KINDS, Rejected, SessionEvent

CACHE_LIMIT = 200_000


@dataclass
class SessionState:
    user_id: str
    opened_ms: int  # when its first event arrived (the start, or one that overtook it)
    closed_ms: int | None = None
    end_sequence: int | None = None
    started: bool = True  # False while its start may still be in flight


class SessionRegistry:
    def __init__(self, path: Path, late_horizon_ms: int, enforce: bool = True, now_ms: int = 0,
                 start_grace_ms: int = 0, scope: str = "", pseudonym: Callable[[str, str], str] | None = None):
        """scope: what this state is the authority for (the replica ring); when it changes, sessions may
        have moved here from another replica, so the state counts as new from now_ms. pseudonym: (tenant,
        session id) -> the name the state stores the session under (a keyed pseudonym, so the file holds no
        raw session id; user ids arrive pseudonymised already); None: the id itself."""
        self._name = pseudonym or (lambda _tenant, session_id: session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.late_horizon_ms = late_horizon_ms
        self.start_grace_ms = start_grace_ms
        self.enforce = enforce
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS sessions (tenant TEXT, session_id TEXT, user_id TEXT, "
                         "opened_ms INTEGER, closed_ms INTEGER, end_sequence INTEGER, "
                         "PRIMARY KEY (tenant, session_id))")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        if "started" not in columns:  # a state folder from before out-of-order starts were accepted
            self._db.execute("ALTER TABLE sessions ADD COLUMN started INTEGER NOT NULL DEFAULT 1")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('created_ms', ?)", (now_ms,))
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('scope', ?)", (scope,))
        if self._db.execute("SELECT value FROM meta WHERE key='scope'").fetchone()[0] != scope:
            self._db.execute("UPDATE meta SET value=? WHERE key='created_ms'", (now_ms,))
            self._db.execute("UPDATE meta SET value=? WHERE key='scope'", (scope,))
        self.created_ms = self._db.execute("SELECT value FROM meta WHERE key='created_ms'").fetchone()[0]
        self._cache: dict[tuple[str, str], SessionState | None] = {}
        self._dirty: dict[tuple[str, str], SessionState] = {}

    def admit(self, event: SessionEvent, now_ms: int) -> None:
        """Raise Rejected if the session rules refuse the event; otherwise record what it changes."""
        kind = event.WhichOneof("body")
        key = (event.tenant_id, self._name(event.tenant_id, event.session_id))
        with self._lock:
            state = self._get(key)
            if kind == "session_start":
                if state is None:
                    self._put(key, SessionState(event.user_id, now_ms))
                elif state.closed_ms is not None and self.enforce and not self._before_end(event, state):
                    raise Rejected("closed_session", f"session {event.session_id} already ended; "
                                                     "start a new session with a new session id")
                elif not state.started:  # it was overtaken by later events
                    state.started = True
                    state.user_id = state.user_id or event.user_id
                    self._put(key, state)
                return
            if state is None:
                awaited = self.enforce and not self._may_predate_state(event, now_ms, kind)
                if awaited and not self._start_in_flight(event):
                    raise Rejected("unknown_session", f"no session_start was seen for session {event.session_id}; "
                                                      "send session_start first (the SDK does)")
                state = SessionState(event.user_id, now_ms, started=not awaited)
                self._put(key, state)
            elif not state.started and self.enforce and now_ms - state.opened_ms > self.start_grace_ms \
                    and not self._may_predate_state(event, now_ms, kind):
                raise Rejected("unknown_session", f"session {event.session_id} has had events for "
                                                  f"{(now_ms - state.opened_ms) / 1000:.0f} s but its session_start "
                                                  "never arrived; send session_start first (the SDK does)")
            if state.closed_ms is not None and self.enforce:
                self._check_closed(event, state, kind, now_ms)
            if kind == "session_end" and state.closed_ms is None:
                state.closed_ms = now_ms
                state.end_sequence = event.sequence
                self._put(key, state)

    def user_of(self, tenant_id: str, session_id: str) -> str:
        with self._lock:
            state = self._get((tenant_id, self._name(tenant_id, session_id)))
        return state.user_id if state else ""

    def commit(self) -> None:
        """Persist what this request changed (once per request: one fsync, not one per event)."""
        with self._lock:
            if not self._dirty:
                return
            rows = [(t, s, st.user_id, st.opened_ms, st.closed_ms, st.end_sequence, int(st.started))
                    for (t, s), st in self._dirty.items()]
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO sessions (tenant, session_id, user_id, opened_ms, "
                                 "closed_ms, end_sequence, started) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
            self._dirty.clear()

    def prune(self, now_ms: int) -> int:
        """Forget sessions closed longer ago than the horizon; returns how many."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM sessions WHERE closed_ms IS NOT NULL AND closed_ms < ?",
                                      (now_ms - self.late_horizon_ms,))
            self._cache.clear()
            return cursor.rowcount

    def close(self) -> None:
        self.commit()
        with self._lock:
            self._db.close()

    def _check_closed(self, event: SessionEvent, state: SessionState, kind: str, now_ms: int) -> None:
        if kind in LATE_KINDS:
            if now_ms - state.closed_ms > self.late_horizon_ms:
                raise Rejected("closed_session", f"session {event.session_id} closed more than "
                                                 f"{self.late_horizon_ms / 1000:.0f} s ago (ingest.late_event_horizon_s)")
        elif not self._before_end(event, state):
            raise Rejected("closed_session", f"session {event.session_id} already ended; only feedback and outcomes "
                                             "are accepted after session_end")

    @staticmethod
    def _before_end(event: SessionEvent, state: SessionState) -> bool:
        return state.end_sequence is not None and event.sequence <= state.end_sequence

    def _start_in_flight(self, event: SessionEvent) -> bool:
        """Numbered after its start (which is 0), so the start may arrive after it."""
        return self.start_grace_ms > 0 and event.sequence > 0

    def _may_predate_state(self, event: SessionEvent, now_ms: int, kind: str) -> bool:
        if event.event_time_ms < self.created_ms:
            return True
        # Late kinds of a session that may have started before this state existed.
        return kind in LATE_KINDS and now_ms - self.created_ms < self.late_horizon_ms

    def _get(self, key: tuple[str, str]) -> SessionState | None:
        if key in self._dirty:
            return self._dirty[key]
        if key in self._cache:
            return self._cache[key]
        row = self._db.execute("SELECT user_id, opened_ms, closed_ms, end_sequence, started FROM sessions "
                               "WHERE tenant=? AND session_id=?", key).fetchone()
        state = SessionState(*row[:4], started=bool(row[4])) if row else None
        if len(self._cache) > CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = state
        return state

    def _put(self, key: tuple[str, str], state: SessionState) -> None:
        self._cache[key] = state
        self._dirty[key] = state


def purge_sessions(path: Path, tenant: str, names: set[str] | None = None, user: str | None = None,
                   whole_tenant: bool = False) -> int:
    """Erase a subject from a capture state file (`liverl forget`): the tenant's sessions stored under one of
    `names` (their keyed pseudonyms) or of `user` (a user pseudonym); every session of the tenant only when
    whole_tenant says so (no names and no user erase nothing: an empty argument never widens an erasure). The
    file is then rebuilt so the rows leave no bytes behind. Returns how many sessions went. A running service
    forgets them from its cache when it next prunes; their records are unreadable already (keys gone)."""
    if not path.exists():
        return 0
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        if whole_tenant:
            deleted = db.execute("DELETE FROM sessions WHERE tenant=?", (tenant,)).rowcount
        else:
            marks = ",".join("?" * len(names or ()))
            deleted = db.execute(f"DELETE FROM sessions WHERE tenant=? AND (session_id IN ({marks or 'NULL'}) "
                                 "OR user_id=?)", (tenant, *(names or ()), user or "\0")).rowcount
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted
    finally:
        db.close()
