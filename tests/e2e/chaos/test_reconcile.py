"""The chaos test's reconciliation and kill schedule on hand-made inputs: each kind of loss is caught."""

from __future__ import annotations

import json
import random

from liverl.v1 import session_event_pb2
from tests.e2e.chaos.ack_proxy import AckedEvent
from tests.e2e.chaos.monkey import kill_schedule
from tests.e2e.chaos.reconcile import index_dead_letters, reconcile

TOPIC = "t.events"
THUMBS_UP = session_event_pb2.FEEDBACK_KIND_THUMBS_UP


def acked(*events: tuple[str, str, str]) -> dict[str, AckedEvent]:
    """(event id, session id, kind) -> the ledger of a tenant "demo" main agent."""
    return {eid: AckedEvent(eid, "demo", sid, kind, "main", THUMBS_UP if kind == "feedback" else 0)
            for eid, sid, kind in events}


def row(session_id: str, trajectory_id: str | None = None, turns: int = 1, tool_calls: int = 1,
        feedback: int = 0) -> dict:
    return {"trajectory_id": trajectory_id or f"traj-{session_id}", "tenant_id": "demo", "session_id": session_id,
            "agent_id": "main", "num_turns": turns,
            "signals": [("tool_calls", float(tool_calls)), ("explicit_feedback", float(feedback))]}


def late_letter(event_id: str, session_id: str) -> dict:
    event = session_event_pb2.SessionEvent(event_id=event_id, session_id=session_id, tenant_id="demo")
    event.feedback.kind = THUMBS_UP
    return {"reason": "late_event", "session_id": session_id, "source_topic": TOPIC, "source_offset": 7,
            "payload": event.SerializeToString()}


def session_letter(session_id: str, event_ids: list[str]) -> dict:
    summary = {"session_id": session_id, "tenant_id": "demo", "events": [f"{e}:session_start" for e in event_ids]}
    return {"reason": "no_model_calls", "session_id": session_id, "source_topic": None, "source_offset": None,
            "payload": json.dumps(summary).encode()}


SESSION = [("e1", "s1", "session_start"), ("e2", "s1", "user_message"), ("e3", "s1", "tool_call"),
           ("e4", "s1", "feedback")]


def test_events_in_the_table_or_a_dead_letter_reconcile():
    ledger = acked(*SESSION, ("e5", "s2", "session_start"), ("e6", "s2", "user_message"))
    letters = index_dead_letters([session_letter("s2", ["e5", "e6"])], TOPIC)
    result = reconcile(ledger, [row("s1", feedback=1)], letters)
    assert (result.acknowledged, result.in_table, result.dead_lettered) == (6, 4, 2)
    assert not result.problems() and result.count_checks == 3


def test_an_acknowledged_event_nowhere_is_lost():
    ledger = acked(*SESSION, ("e5", "s2", "session_start"))
    result = reconcile(ledger, [row("s1", feedback=1)], index_dead_letters([], TOPIC))
    assert len(result.lost) == 1 and "e5" in result.lost[0]


def test_an_event_counted_twice_or_missing_from_its_row_is_caught():
    result = reconcile(acked(*SESSION), [row("s1", tool_calls=2, feedback=1)], index_dead_letters([], TOPIC))
    assert len(result.count_mismatches) == 1 and "tool_calls" in result.count_mismatches[0]
    result = reconcile(acked(*SESSION), [row("s1", feedback=0)], index_dead_letters([], TOPIC))
    assert len(result.count_mismatches) == 1 and "explicit_feedback" in result.count_mismatches[0]


def test_late_feedback_may_sit_in_a_dead_letter_instead_of_the_row():
    letters = index_dead_letters([late_letter("e4", "s1")], TOPIC)
    result = reconcile(acked(*SESSION), [row("s1", feedback=0)], letters)
    assert not result.problems() and result.dead_lettered == 1


def test_a_trajectory_id_twice_is_a_duplicate():
    result = reconcile(acked(*SESSION), [row("s1", feedback=1), row("s1", feedback=1)], index_dead_letters([], TOPIC))
    assert len(result.duplicate_trajectories) == 1


def test_the_kill_schedule_kills_every_stage_with_room_to_restart():
    stages = ["capture", "serve", "distill", "train"]
    schedule = kill_schedule(random.Random(3), stages, (10.0, 120.0), 3, 40.0, (1.0, 5.0))
    assert {k.stage for k in schedule} == set(stages) and len(schedule) == 7
    assert [k.at_s for k in schedule] == sorted(k.at_s for k in schedule)
    for stage in stages:
        times = [k.at_s for k in schedule if k.stage == stage]
        assert all(b - a >= 40.0 for a, b in zip(times, times[1:]))


def test_a_sealed_late_letter_of_the_session_may_hold_the_feedback_its_row_lacks():
    """A late letter's payload is the record's sealed value (VERSION + nonce + ciphertext): its event id cannot be
    read, so it allows one event of its session to be missing from the row's counts, and only of its session."""
    sealed = {"reason": "late_event", "tenant_id": "demo", "session_id": "s1", "source_topic": TOPIC,
              "source_offset": 9, "payload": b"\x01" + bytes(range(40))}
    letters = index_dead_letters([sealed], TOPIC)
    assert letters.sealed_letters == {("demo", "s1"): 1} and not letters.record_event_ids
    assert not reconcile(acked(*SESSION), [row("s1", feedback=0)], letters).count_mismatches
    other = index_dead_letters([sealed | {"session_id": "s2"}], TOPIC)
    result = reconcile(acked(*SESSION), [row("s1", feedback=0)], other)
    assert len(result.count_mismatches) == 1 and "explicit_feedback" in result.count_mismatches[0]
