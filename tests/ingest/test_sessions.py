"""Unknown and closed sessions, late feedback within the horizon, state that survives a restart."""

from __future__ import annotations

import pytest

from ingest.sessions import SessionRegistry
from ingest.validation import Rejected
from liverl.v1 import session_event_pb2

T0 = 1_800_000_000_000
HORIZON_MS = 3_600_000


def event(kind: str, sequence: int, session="s1", time_ms=T0 + 1000) -> session_event_pb2.SessionEvent:
    e = session_event_pb2.SessionEvent(tenant_id="acme", session_id=session, sequence=sequence, event_time_ms=time_ms)
    getattr(e, kind).SetInParent()
    return e


def reason(registry, e, now_ms) -> str:
    with pytest.raises(Rejected) as caught:
        registry.admit(e, now_ms)
    return caught.value.reason


def test_rules_for_unknown_open_and_closed_sessions(tmp_path):
    registry = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0)
    assert reason(registry, event("user_message", 1), T0 + 1000) == "unknown_session"
    registry.admit(event("session_start", 0), T0 + 1000)
    registry.admit(event("user_message", 1), T0 + 1000)
    registry.admit(event("session_end", 2), T0 + 2000)
    assert reason(registry, event("tool_call", 3), T0 + 3000) == "closed_session"
    registry.admit(event("tool_call", 1), T0 + 3000)  # a retry of something before the end
    registry.admit(event("feedback", 4), T0 + HORIZON_MS)  # late on purpose: accepted
    registry.admit(event("outcome", 5), T0 + HORIZON_MS)
    assert reason(registry, event("feedback", 6), T0 + 2000 + HORIZON_MS + 1) == "closed_session"


def test_state_survives_a_restart(tmp_path):
    registry = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0)
    registry.admit(event("session_start", 0), T0 + 1000)
    registry.admit(event("session_start", 0, session="s2"), T0 + 1000)
    registry.admit(event("session_end", 1, session="s2"), T0 + 1000)
    registry.commit()
    registry.close()
    again = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0 + 50_000)
    assert again.created_ms == T0
    again.admit(event("user_message", 1), T0 + 60_000)
    assert reason(again, event("user_message", 2, session="s2"), T0 + 60_000) == "closed_session"


def test_a_fresh_state_lets_through_sessions_older_than_itself(tmp_path):
    registry = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0)
    registry.admit(event("tool_call", 7, session="old", time_ms=T0 - 5000), T0 + 10)
    off = SessionRegistry(tmp_path / "off.sqlite", HORIZON_MS, enforce=False, now_ms=T0)
    off.admit(event("tool_call", 7, session="new"), T0 + 10)


def test_a_start_overtaken_in_flight_is_awaited_for_the_grace_only(tmp_path):
    registry = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0, start_grace_ms=60_000)
    registry.admit(event("session_end", 3), T0 + 1000)  # end first, then the middle, start last
    registry.admit(event("tool_call", 2), T0 + 1100)
    registry.admit(event("user_message", 1), T0 + 1200)
    registry.admit(event("session_start", 0), T0 + 1300)
    assert reason(registry, event("tool_call", 4), T0 + 1400) == "closed_session"
    registry.admit(event("feedback", 5), T0 + 1400)
    # sequence 0 that is not a start: nothing can precede it, so no start is in flight
    assert reason(registry, event("user_message", 0, session="s2"), T0 + 1000) == "unknown_session"
    registry.admit(event("user_message", 1, session="s3"), T0 + 1000)  # its start may come...
    registry.admit(event("user_message", 2, session="s3"), T0 + 61_000)
    assert reason(registry, event("user_message", 3, session="s3"), T0 + 61_001) == "unknown_session"  # ...it did not
    strict = SessionRegistry(tmp_path / "strict.sqlite", HORIZON_MS, now_ms=T0)  # no grace: the start comes first
    assert reason(strict, event("user_message", 1), T0 + 1000) == "unknown_session"


def test_an_awaited_start_survives_a_restart_and_a_ring_change_makes_the_state_new(tmp_path):
    registry = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0, start_grace_ms=60_000, scope="a,b")
    registry.admit(event("user_message", 1), T0 + 1000)
    registry.commit()
    registry.close()
    again = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0 + 5000, start_grace_ms=60_000, scope="a,b")
    assert again.created_ms == T0
    assert reason(again, event("user_message", 2), T0 + 90_000) == "unknown_session"
    again.admit(event("session_start", 0), T0 + 90_000)
    again.admit(event("user_message", 2), T0 + 90_000)
    again.close()
    moved = SessionRegistry(tmp_path / "s.sqlite", HORIZON_MS, now_ms=T0 + 100_000, scope="a,b,c")
    assert moved.created_ms == T0 + 100_000  # sessions may have moved here: those older are let through
    moved.admit(event("tool_call", 0, session="elsewhere", time_ms=T0 + 50_000), T0 + 100_001)
