"""Readiness, dedupe and late events, as pure decisions and through the Beam step."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import dead_letters
from pipelines.parse import CALL, EVENT, Parsed
from pipelines.records import RawRecord
from pipelines.sessionize import CLOSED, DEAD, PENDING, READY, DecideSession, Timing, decide
from tests.pipelines.producing import T0, coding_session

HOUR = 3600_000
KEY = ("demo", "s")  # (tenant id, session id)


def _parsed(events, calls) -> list[Parsed]:
    items = [Parsed(EVENT, RawRecord("ev", 0, i, 0, None, e.SerializeToString(), ()), e) for i, e in enumerate(events)]
    items += [Parsed(CALL, RawRecord("mc", 0, i, 0, None, c.SerializeToString(), ()), c) for i, c in enumerate(calls)]
    return items


def _timing(as_of_s: float, horizon_ms=HOUR, idle_ms=2 * HOUR) -> Timing:
    return Timing(as_of_ms=T0 + int(as_of_s * 1000), reward_horizon_ms=horizon_ms, idle_timeout_ms=idle_ms,
                  late_event_retention_ms=24 * HOUR)


def test_ended_session_waits_for_the_reward_horizon():
    items = _parsed(*coding_session("s"))  # ends at T0 + 9 s
    assert decide(KEY, items, [], _timing(9 + 3599)).status == PENDING
    ready = decide(KEY, items, [], _timing(9 + 3600))
    assert ready.status == READY and ready.closed_at_ms == T0 + 3609_000
    assert [e.event_id for e in ready.session.events] == sorted(
        (e.event_id for e in ready.session.events), key=lambda i: int(i[1:]))


def test_pending_session_keeps_every_raw_record_and_idle_sessions_become_ready():
    items = _parsed(*coding_session("s", end=False))
    pending = decide(KEY, items, [], _timing(60))
    assert pending.status == PENDING and len(pending.pending) == len(items)
    assert decide(KEY, items, [], _timing(8 + 7200)).status == READY  # last activity at 8 s


def test_duplicates_are_dropped_and_counted():
    events, calls = coding_session("s")
    decision = decide(KEY, _parsed(events + events[:2], calls + calls[:1]), [], _timing(10_000))
    assert decision.duplicates == 3
    assert len(decision.session.events) == len(events) and len(decision.session.model_calls) == len(calls)


def test_records_of_a_closed_session_are_late():
    events, _ = coding_session("s")
    decision = decide(KEY, _parsed(events[-2:], []), [T0], _timing(10))
    assert decision.status == CLOSED and decision.late_events == 2
    assert {d["reason"] for d in decision.dead} == {dead_letters.LATE_EVENT}
    assert decision.closed_at_ms == T0  # still remembered
    assert decide(KEY, [], [T0], _timing(48 * 3600)).closed_at_ms is None  # forgotten after the retention


def test_unbuildable_sessions_are_dead():
    events, calls = coding_session("s")
    assert decide(KEY, _parsed(events[1:], calls), [], _timing(10_000)).dead[0]["reason"] == \
        dead_letters.MISSING_SESSION_START
    assert decide(KEY, _parsed(events, []), [], _timing(10_000)).dead[0]["reason"] == dead_letters.NO_MODEL_CALLS


def test_decide_session_step_routes_every_output():
    ready, pending = coding_session("ready"), coding_session("pending", t=100_000, end=False)
    def records(events, calls):  # as ParseRecord emits them: plain tuples, parsed again after the shuffle
        return [tuple(item.record) for item in _parsed(events, calls)]

    groups = [(("demo", "ready"), {"records": records(*ready), "closed": []}),
              (("demo", "pending"), {"records": records(*pending), "closed": []}),
              (("demo", "late"), {"records": records(coding_session("late")[0][:1], []), "closed": [T0]})]
    with BeamTestPipeline() as pipeline:
        out = (pipeline | beam.Create(groups)
               | beam.ParDo(DecideSession(_timing(10_000), "ev", "mc")).with_outputs(PENDING, CLOSED, DEAD, main="ready"))
        assert_that(out.ready | "Ids" >> beam.Map(lambda s: s.session_id), equal_to(["ready"]), label="Ready")
        assert_that(out[PENDING] | "Count" >> beam.combiners.Count.Globally(),
                    equal_to([len(_parsed(*pending))]), label="Pending")
        assert_that(out[CLOSED] | "Closed" >> beam.Map(lambda r: (r["tenant_id"], r["session_id"])),
                    equal_to([("demo", "ready"), ("demo", "late")]), label="Closed")
        assert_that(out[DEAD] | "Reasons" >> beam.Map(lambda r: r["reason"]), equal_to([dead_letters.LATE_EVENT]),
                    label="Dead")


def test_tenants_sharing_a_session_id_and_event_ids_are_never_merged_or_deduplicated_together():
    """Tenant B reuses tenant A's session id AND event ids: each tenant's session stays whole and its own."""
    a_events, a_calls = coding_session("shared")
    b_events, b_calls = [], []
    for message in a_events + a_calls:  # same ids, other tenant
        copy = type(message)()
        copy.CopyFrom(message)
        copy.tenant_id = "tenant-b"
        (b_events if isinstance(message, type(a_events[0])) else b_calls).append(copy)
    items = _parsed(a_events + b_events, a_calls + b_calls)
    by_key: dict = {}
    for item in items:  # as GroupBySession groups ParseRecord's keys
        by_key.setdefault(item.session_key, []).append(item)
    assert set(by_key) == {("demo", "shared"), ("tenant-b", "shared")}
    for key, group in by_key.items():
        decision = decide(key, group, [], _timing(10_000))
        assert decision.status == READY and decision.duplicates == 0
        assert decision.session.tenant_id == key[0]
        assert {m.tenant_id for m in decision.session.events + decision.session.model_calls} == {key[0]}
        assert len(decision.session.events) == len(a_events) and len(decision.session.model_calls) == len(a_calls)
    with pytest.raises(ValueError, match="grouped with records"):
        decide(("demo", "shared"), items, [], _timing(10_000))  # a merged group is a bug, never silent
