"""Whole batches on the real broker, Beam runner and Delta tables: exactly-once, spanning, late, dead letters."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from liverl.contracts import names
from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION, TRAJECTORY_SCHEMA
from liverl.privacy import row_opener_for
from liverl.v1 import session_event_pb2 as se
from pipelines import dead_letters, table
from pipelines.distill import distill_once
from tests.pipelines.producing import T0, coding_session, event, orchestrator_session, produce

LATER = T0 + 3600_000  # a batch clock well past every test session


class Crash(RuntimeError):
    pass


def _crash_at(phase: str):
    def on_phase(name: str) -> None:
        if name == phase:
            raise Crash(phase)
    return on_phase


def _rows(config) -> list[dict]:
    return DeltaTable(config.table.trajectories_uri).to_pyarrow_table().to_pylist()


def _dead(config) -> list[dict]:
    if not DeltaTable.is_deltatable(config.table.dead_letters_uri):
        return []
    return DeltaTable(config.table.dead_letters_uri).to_pyarrow_table().to_pylist()


def test_one_batch_commits_trajectories_with_offsets_and_app_transaction(distill_config):
    config = distill_config
    (e1, c1), (e2, c2) = coding_session("s1"), orchestrator_session("s2")
    produce(config, e1 + e2, c1 + c2)
    report = distill_once(config, now_ms=LATER)
    assert report.committed and report.sessions == 2 and report.trajectories == 3

    table = DeltaTable(config.table.trajectories_uri)
    assert table.transaction_version(names.DISTILL_APP_ID) == 1
    commit = table.history(1)[0]
    assert commit[names.COMMIT_BATCH_ID] == report.batch_id
    offsets = json.loads(commit[names.COMMIT_KAFKA_OFFSETS])
    consumed = sum(end - first for parts in offsets.values() for first, end in parts.values())
    assert consumed == len(e1 + e2 + c1 + c2)
    assert commit[names.COMMIT_SCHEMA_VERSION] == str(TABLE_SCHEMA_VERSION)
    rows = _rows(config)
    assert {(r["session_id"], r["agent_id"]) for r in rows} == {("s1", "main"), ("s2", "main"), ("s2", "sub-1")}
    assert all(r["batch_id"] == report.batch_id and r["event_date"] == "2026-09-21" for r in rows)
    assert report.line().startswith(f"batch {report.batch_id} | sessions 2 ") and "table v0" in report.line()

    again = distill_once(config, now_ms=LATER)  # nothing new: no commit, no version
    assert not again.committed and DeltaTable(config.table.trajectories_uri).version() == table.version()


# A crash at each phase, then a re-run (test name short: fresh_topics keys topics on its first 60 characters).
@pytest.mark.parametrize("phase", ["before_commit", "during_commit", "after_commit"])
def test_crash_then_rerun_is_exactly_once(distill_config, phase):
    config = distill_config
    events, calls = coding_session("s1")
    bad_events, bad_calls = coding_session("s2")
    bad_calls[0].completion_logprobs.append(-1.0)  # token mismatch: a session-level dead letter
    produce(config, events + bad_events, calls + bad_calls,
            raw=[(config.kafka.session_events_topic, b"s3", b"\xff\x00garbage", ())])
    with pytest.raises(Crash):
        distill_once(config, now_ms=LATER, on_phase=_crash_at(phase))
    if phase == "during_commit":  # as if the writer died after its data file, before the Delta log entry
        stray = Path(config.table.trajectories_uri) / "event_date=2026-09-21" / "part-00000-crashed.parquet"
        stray.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist([{
            "trajectory_id": "stray", "session_id": "s1", "tenant_id": "demo", "agent_role": "single",
            "agent_id": "main", "token_ids": [1], "loss_mask": [1], "behaviour_logprobs": [-1.0], "batch_id": "x",
            "schema_version": 1, "event_date": "2026-09-21"}], schema=TRAJECTORY_SCHEMA), stray)
    produce(config, *orchestrator_session("s4"))  # arrives between the crash and the re-run
    first = distill_once(config, now_ms=LATER + 1)
    second = distill_once(config, now_ms=LATER + 2)
    if phase == "after_commit":  # the crashed batch was committed; the re-run takes only what came after
        assert first.seq == 2 and first.sessions == 1
    else:  # the re-run replays the same plan (same ranges), the next batch takes the rest
        assert first.seq == 1 and first.sessions == 1 and second.sessions == 1
    rows = _rows(config)
    assert sorted((r["session_id"], r["agent_id"]) for r in rows) == [("s1", "main"), ("s4", "main"), ("s4", "sub-1")]
    assert len({r["trajectory_id"] for r in rows}) == 3
    assert sorted(d["reason"] for d in _dead(config)) == [dead_letters.MALFORMED_EVENT, dead_letters.TOKEN_MISMATCH]


def test_a_session_spanning_batches_is_emitted_once(distill_config):
    config = distill_config
    events, calls = coding_session("long")
    produce(config, events[:3], calls[:1])  # started, not ended
    first = distill_once(config, now_ms=LATER)
    assert first.committed and first.trajectories == 0 and first.counters["sessions_pending"] == 1
    idle = distill_once(config, now_ms=LATER + 1)  # nothing new and still pending: no commit
    assert not idle.committed
    produce(config, events[3:], calls[1:])
    second = distill_once(config, now_ms=LATER + 2)
    assert second.trajectories == 1 and second.counters.get("sessions_pending", 0) == 0
    (row,) = _rows(config)
    assert row["num_model_calls"] == 3 and row["segment_starts"] == [0, 8]
    assert not distill_once(config, now_ms=LATER + 3).committed


def test_the_reward_horizon_holds_a_session_for_delayed_feedback(distill_config):
    config = distill_config
    config.pipelines.reward_horizon_s = 600.0
    events, calls = coding_session("fb")  # ends at T0 + 9 s
    produce(config, events, calls)
    assert distill_once(config, now_ms=T0 + 60_000).trajectories == 0  # within the horizon: pending
    produce(config, [event("fb", 300, feedback=se.Feedback(kind=se.FEEDBACK_KIND_EDIT_KEPT, value=1.0,
                                                           target_call_id="k1"))])
    report = distill_once(config, now_ms=T0 + 700_000)
    assert report.trajectories == 1
    (row,) = _rows(config)
    assert dict(row["signals"])["edits_kept"] == 1.0


def test_duplicates_are_dropped_and_late_events_are_counted_dead_letters(distill_config):
    config = distill_config
    events, calls = coding_session("d")
    produce(config, events + events[:3], calls + calls[:1])  # producer retries: duplicates
    first = distill_once(config, now_ms=LATER)
    assert first.trajectories == 1 and first.counters["duplicates"] == 4
    late = event("d", 4000, feedback=se.Feedback(kind=se.FEEDBACK_KIND_EDIT_REVERTED, target_call_id="k1"))
    produce(config, [late])
    second = distill_once(config, now_ms=LATER + 1)
    assert second.trajectories == 0 and second.counters["late_events"] == 1
    assert second.dead_letters == {dead_letters.LATE_EVENT: 1}
    (letter,) = _dead(config)
    assert letter["session_id"] == "d" and letter["payload"] == late.SerializeToString()
    assert len(_rows(config)) == 1


def test_every_session_and_record_dead_letter_reason_is_recorded_and_counted(distill_config):
    config = distill_config
    sessions = {name: coding_session(name) for name in ("ok", "nostart", "nocalls", "missing", "mismatch")}
    sessions["nostart"] = (sessions["nostart"][0][1:], sessions["nostart"][1])
    sessions["nocalls"] = (sessions["nocalls"][0], [])
    sessions["missing"] = (sessions["missing"][0], sessions["missing"][1][1:])  # missing-r1 referenced, absent
    mismatch_calls = sessions["mismatch"][1]
    del mismatch_calls[1].completion_logprobs[:]
    newer = coding_session("newer")[0][0]
    newer.schema_version = names.EVENT_SCHEMA_VERSION + 1
    produce(config, [e for events, _ in sessions.values() for e in events],
            [c for _, calls in sessions.values() for c in calls],
            raw=[(config.kafka.session_events_topic, b"x", b"\x08\xff\xff", ()),
                 (config.kafka.model_calls_topic, b"newer", newer.SerializeToString(), ())])
    report = distill_once(config, now_ms=LATER)
    assert report.trajectories == 1
    expected = {dead_letters.MISSING_SESSION_START: 1, dead_letters.NO_MODEL_CALLS: 1,
                dead_letters.MISSING_MODEL_CALL: 1, dead_letters.TOKEN_MISMATCH: 1,
                dead_letters.MALFORMED_EVENT: 1, dead_letters.UNSUPPORTED_SCHEMA: 1}
    assert report.dead_letters == expected
    letters = _dead(config)
    assert {d["reason"]: sum(1 for x in letters if x["reason"] == d["reason"]) for d in letters} == expected
    assert all(d["batch_id"] == report.batch_id and d["message"] for d in letters)
    assert {d["session_id"] for d in letters if d["source_topic"] is None} == {"nostart", "nocalls", "missing",
                                                                               "mismatch"}


def _as_tenant(messages, tenant: str, token_shift: int = 0):
    """Copies of messages under another tenant: same session id, same event and request ids."""
    copies = []
    for message in messages:
        copy = type(message)()
        copy.CopyFrom(message)
        copy.tenant_id = tenant
        if token_shift and hasattr(copy, "completion_token_ids"):
            copy.completion_token_ids[:] = [t + token_shift for t in copy.completion_token_ids]
        copies.append(copy)
    return copies


def test_two_tenants_sharing_session_and_event_ids_get_separate_trajectories(distill_config):
    config = distill_config
    a_events, a_calls = coding_session("shared")
    b_events, b_calls = _as_tenant(a_events, "tenant-b"), _as_tenant(a_calls, "tenant-b", token_shift=100)
    produce(config, a_events + b_events, a_calls + b_calls)
    report = distill_once(config, now_ms=LATER)
    assert report.sessions == 2 and report.trajectories == 2 and report.counters.get("duplicates", 0) == 0
    committed = _rows(config)
    assert all(r["token_ids"] == [] and r["sealed_token_ids"] and r["subject_id"] for r in committed)  # sealed
    opener = row_opener_for(config)
    rows = {r["tenant_id"]: opener.open_row(r) for r in committed}
    assert set(rows) == {"demo", "tenant-b"} and rows["demo"]["trajectory_id"] != rows["tenant-b"]["trajectory_id"]
    for tenant, calls in (("demo", a_calls), ("tenant-b", b_calls)):
        row = rows[tenant]
        assert row["session_id"] == "shared" and row["num_model_calls"] == len(calls)
        sampled = [t for t, m in zip(row["token_ids"], row["loss_mask"]) if m]
        assert sampled == [t for c in calls for t in c.completion_token_ids]  # only its own tenant's tokens


def test_a_retention_gap_is_recorded_and_skipped_or_fails_by_policy(distill_config, monkeypatch):
    """What is real: the broker, the Beam job reading from the earliest offset, the Delta tables. What is not:
    tansu 0.6 cannot delete records (it enforces no retention and drops the connection on DeleteRecords), so the
    broker's answer to "earliest available offset" is replaced by one saying that retention deleted the first two
    records produced after the last commit. The reader really starts past them, so the session lost its start."""
    from pipelines import distill, kafka_source

    config = distill_config
    produce(config, *coding_session("before"))
    first = distill_once(config, now_ms=LATER)
    starts = {tp: end for tp, end in table.read_committed(config.table.trajectories_uri).next_starts().items()}
    produce(config, *coding_session("after"))
    topic = config.kafka.session_events_topic
    marks = kafka_source.high_water_marks(config.kafka.client_kwargs(), [topic], starts)
    (tp,) = [tp for tp, mark in marks.items() if mark > starts[tp]]
    deleted_to = starts[tp] + 2
    real = kafka_source.earliest_offsets
    monkeypatch.setattr(distill, "earliest_offsets", lambda kwargs, parts: real(kwargs, parts) | {tp: deleted_to})

    config.pipelines.on_retention_gap = "fail"
    with pytest.raises(kafka_source.RetentionGapError, match="pipelines.on_retention_gap"):
        distill_once(config, now_ms=LATER + 1)
    assert DeltaTable(config.table.trajectories_uri).version() == first.table_version  # nothing committed

    config.pipelines.on_retention_gap = "skip"
    report = distill_once(config, now_ms=LATER + 2)
    assert report.committed and report.counters["retention_gap_records"] == 2
    assert report.dead_letters == {dead_letters.RETENTION_GAP: 1, dead_letters.MISSING_SESSION_START: 1}
    (gap,) = [d for d in _dead(config) if d["reason"] == dead_letters.RETENTION_GAP]
    assert json.loads(gap["payload"]) == {"topic": topic, "partition": tp[1], "expected_offset": starts[tp],
                                          "earliest_offset": deleted_to, "records_lost": 2}
    assert report.offsets[topic][str(tp[1])] == [deleted_to, marks[tp]]
    assert not distill_once(config, now_ms=LATER + 3).committed  # the gap is recorded once, offsets moved on
