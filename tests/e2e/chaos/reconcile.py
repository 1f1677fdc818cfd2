"""Reconcile what clients were told was stored against the trajectory and dead-letter tables.

The table keeps no event ids, so an acknowledged event is found through its session and through counts:
- its (tenant, session) has trajectory rows, and the rows' counts of the countable kinds match the
  acknowledged events exactly (user messages: `num_turns`; tool calls per agent: `signals.tool_calls`;
  thumbs and ratings: the main agent's `signals.explicit_feedback`), so an event lost or counted twice shows;
- or a dead letter holds it: record-level letters (e.g. `late_event`) carry the raw event, session-level
  letters list the session's event ids in their JSON summary.
A late letter may also hold a redelivered copy of an event already in the table (at-least-once delivery
after a kill), so a count must lie in [acknowledged - late-lettered, acknowledged]. A late letter of a sealed
record (privacy.encrypt_payloads) cannot be read without its record's key and subject header: it is matched to
its session only, and lowers that bound by one for every count of the session.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from liverl.v1 import session_event_pb2
from tests.e2e.chaos.ack_proxy import AckedEvent

EXPLICIT_FEEDBACK = {session_event_pb2.FEEDBACK_KIND_THUMBS_UP, session_event_pb2.FEEDBACK_KIND_THUMBS_DOWN,
                     session_event_pb2.FEEDBACK_KIND_RATING}
MAIN_AGENT = "main"


@dataclass
class Reconciliation:
    acknowledged: int = 0
    in_table: int = 0  # acknowledged events whose session has trajectory rows (counts checked below)
    dead_lettered: int = 0  # acknowledged events held by a dead letter
    lost: list[str] = field(default_factory=list)
    duplicate_trajectories: list[str] = field(default_factory=list)
    count_mismatches: list[str] = field(default_factory=list)
    count_checks: int = 0
    sessions_acknowledged: int = 0
    sessions_in_table: int = 0
    sessions_dead_lettered: int = 0
    sessions_unknown_to_clients: int = 0  # table sessions with no acknowledged event (reported, not judged)
    trajectories: int = 0
    dead_letters_by_reason: Counter = field(default_factory=Counter)

    def problems(self) -> list[str]:
        return ([f"lost: {line}" for line in self.lost] + [f"duplicate: {line}" for line in self.duplicate_trajectories]
                + [f"count: {line}" for line in self.count_mismatches])

    def line(self) -> str:
        return (f"acknowledged {self.acknowledged} | in table {self.in_table} | dead-lettered {self.dead_lettered} "
                f"| lost {len(self.lost)} | duplicates {len(self.duplicate_trajectories)} "
                f"| count checks {self.count_checks} ({len(self.count_mismatches)} off) "
                f"| sessions {self.sessions_acknowledged}: {self.sessions_in_table} in table, "
                f"{self.sessions_dead_lettered} dead-lettered | trajectories {self.trajectories} "
                f"| dead letters {dict(self.dead_letters_by_reason)}")


def read_delta(uri: str, columns: list[str] | None = None) -> list[dict]:
    """Every row of the Delta table at uri (none while it does not exist)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return []
    return DeltaTable(uri).to_pyarrow_table(columns=columns).to_pylist()


@dataclass
class DeadLetters:
    """The dead-letter table, indexed the way the reconciliation looks things up."""

    record_event_ids: set[str]  # session events held by record-level letters (late_event, malformed_event, ...)
    # (tenant, session) -> record-level letters whose event cannot be read: a sealed value (liverl/privacy/sealing.py)
    # opens only with its record's key and subject header, which a dead letter does not keep
    sealed_letters: Counter
    session_event_ids: dict[tuple[str, str], set[str]]  # (tenant, session) -> event ids a session letter lists
    agent_letters: dict[tuple[str, str], set[str]]  # (tenant, session) -> agent ids with an agent-level letter
    by_reason: Counter


def index_dead_letters(rows: list[dict], events_topic: str) -> DeadLetters:
    letters = DeadLetters(set(), Counter(), defaultdict(set), defaultdict(set), Counter())
    for row in rows:
        letters.by_reason[row["reason"]] += 1
        payload = row.get("payload") or b""
        if row.get("source_topic") == events_topic and row.get("source_offset") is not None:
            try:
                letters.record_event_ids.add(session_event_pb2.SessionEvent.FromString(payload).event_id)
            except Exception:  # sealed, or a malformed record: no event id to match, still counted by reason
                if row.get("session_id"):
                    letters.sealed_letters[(row.get("tenant_id") or "", row["session_id"])] += 1
        elif row.get("source_topic") is None and row.get("session_id"):
            summary = json.loads(payload)
            key = (summary.get("tenant_id", ""), row["session_id"])
            letters.session_event_ids[key] |= {entry.split(":", 1)[0] for entry in summary.get("events", [])}
            if summary.get("agent_id"):
                letters.agent_letters[key].add(summary["agent_id"])
    return letters


def reconcile(acked: dict[str, AckedEvent], trajectory_rows: list[dict], letters: DeadLetters) -> Reconciliation:
    result = Reconciliation(acknowledged=len(acked), trajectories=len(trajectory_rows),
                            dead_letters_by_reason=letters.by_reason)
    ids = Counter(row["trajectory_id"] for row in trajectory_rows)
    result.duplicate_trajectories = [f"trajectory {tid} appears {n} times" for tid, n in ids.items() if n > 1]
    rows_by_session: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in trajectory_rows:
        rows_by_session[(row["tenant_id"], row["session_id"])].append(row)
    events_by_session: dict[tuple[str, str], list[AckedEvent]] = defaultdict(list)
    for event in acked.values():
        events_by_session[event.session_key].append(event)
    result.sessions_acknowledged = len(events_by_session)
    result.sessions_unknown_to_clients = len(set(rows_by_session) - set(events_by_session))

    for key, events in events_by_session.items():
        rows = rows_by_session.get(key, [])
        if rows:
            result.sessions_in_table += 1
        elif key in letters.session_event_ids:
            result.sessions_dead_lettered += 1
        for event in events:
            if event.event_id in letters.record_event_ids:
                result.dead_lettered += 1
            elif rows:
                result.in_table += 1
            elif event.event_id in letters.session_event_ids.get(key, ()):
                result.dead_lettered += 1
            else:
                result.lost.append(f"{event.kind} {event.event_id} of session {key}: no trajectory row, "
                                   f"and no dead letter holds it")
        if rows:
            _check_counts(key, events, rows, letters, result)
    return result


def _check_counts(key, events: list[AckedEvent], rows: list[dict], letters: DeadLetters,
                  result: Reconciliation) -> None:
    """Every countable event of a tabled session is counted exactly once by its rows."""
    late = letters.record_event_ids
    sealed = letters.sealed_letters.get(key, 0)  # unreadable late copies of this session: any kind, so any count
    user_messages = [e for e in events if e.kind == "user_message"]
    feedback = [e for e in events if e.kind == "feedback" and e.feedback_kind in EXPLICIT_FEEDBACK]
    tool_calls: dict[str, list[AckedEvent]] = defaultdict(list)
    for event in events:
        if event.kind == "tool_call":
            tool_calls[event.agent_id].append(event)

    def check(what: str, counted, expected: list[AckedEvent]) -> None:
        if counted is None:
            return  # the reward component that counts it is off: nothing to compare
        result.count_checks += 1
        late_copies = min(len(expected), sum(1 for e in expected if e.event_id in late) + sealed)
        low, high = len(expected) - late_copies, len(expected)
        if not low <= counted <= high:
            result.count_mismatches.append(f"session {key}: {what} counts {counted:g}, acknowledged {high} "
                                           f"({late_copies} of them in late dead letters)")

    for row in rows:
        signals = dict(row.get("signals") or ())
        check(f"agent {row['agent_id']} num_turns", row.get("num_turns"), user_messages)
        check(f"agent {row['agent_id']} tool_calls", signals.get("tool_calls"), tool_calls.get(row["agent_id"], []))
        if row["agent_id"] == MAIN_AGENT:
            check("main explicit_feedback", signals.get("explicit_feedback"), feedback)
    tabled_agents = {row["agent_id"] for row in rows}
    for agent_id, calls in tool_calls.items():
        kept = [e for e in calls if e.event_id not in late]
        if agent_id not in tabled_agents and kept and agent_id not in letters.agent_letters.get(key, ()):
            result.lost.append(f"{len(kept)} tool calls of agent {agent_id} in session {key}: the session is in "
                               "the table but that agent has no row and no dead letter")
