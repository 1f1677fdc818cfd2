"""Pending sessions in words: the settings that hold them, the oldest one's age, and when nothing can come out."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from liverl.config.pipelines import PipelinesConfig
from pipelines.pending import PendingSessions, duration, impossible_within, pending_sessions
from pipelines.records import RAW_RECORD_SCHEMA, RawRecord

HOUR = 3600.0


def pending(sessions=3, age_s=60.0, horizon_s=HOUR, idle_s=2 * HOUR) -> PendingSessions:
    return PendingSessions(sessions=sessions, oldest_record_ms=1_000_000, as_of_ms=1_000_000 + int(age_s * 1000),
                           reward_horizon_s=horizon_s, idle_timeout_s=idle_s)


def test_the_note_names_the_count_the_oldest_age_and_the_horizon():
    assert pending(1779, age_s=552).note() == "pending 1779, oldest 9m12s, horizon 1h0m"
    assert [duration(s) for s in (12, 552, 3600, 7260)] == ["12s", "9m12s", "1h0m", "2h1m"]


def test_nothing_distilled_under_a_horizon_longer_than_the_wait_says_why():
    warning = pending(1779, age_s=552).warning(emitted=0)
    assert warning.startswith("waiting: 1779 sessions pend") and "pipelines.reward_horizon_s" in warning
    assert "oldest is 9m12s old" in warning and "configs/demo.toml" in warning
    assert pending(1779, age_s=552).warning(emitted=4) is None  # sessions come out: the horizon is just doing its job
    assert pending(0).warning(emitted=0) is None


def test_sessions_pending_far_past_what_the_settings_allow_are_flagged():
    late = pending(2, age_s=5 * HOUR, horizon_s=HOUR, idle_s=2 * HOUR)  # > 2 x max(1h, 2h)
    assert late.warning(emitted=9).startswith("far past: the oldest pending session is 5h0m old")
    assert "event_time_ms" in late.warning(emitted=9)
    assert pending(2, age_s=3 * HOUR).warning(emitted=9) is None  # within 2 x the idle timeout: usual


def test_a_run_shorter_than_the_wait_is_impossible():
    production = PipelinesConfig()
    problem = impossible_within(600, production)
    assert "no session can become a trajectory within this run's 10m00s" in problem
    assert "pipelines.reward_horizon_s" in problem
    assert impossible_within(600, PipelinesConfig(reward_horizon_s=5.0)) is None


def test_the_oldest_record_comes_from_the_staged_files_and_the_summary_round_trips(tmp_path):
    def record(offset, ts):
        return RawRecord("events", 0, offset, ts, b"k", b"v", ()).to_row()

    for name, stamps in (("pending-0.parquet", [5_000, 3_000]), ("pending-1.parquet", [4_000])):
        pq.write_table(pa.Table.from_pylist([record(i, t) for i, t in enumerate(stamps)], schema=RAW_RECORD_SCHEMA),
                       tmp_path / name)
    files = tuple(str(tmp_path / name) for name in ("pending-0.parquet", "pending-1.parquet"))
    got = pending_sessions(PipelinesConfig(), 63_000, 2, files, pafs.LocalFileSystem())
    assert got.oldest_record_ms == 3_000 and got.oldest_age_s() == 60.0 and got.reward_horizon_s == HOUR
    assert PendingSessions.from_summary({"sessions": 1, "pending": got.to_summary()}) == got
    assert PendingSessions.from_summary({"sessions": 1}) is None  # a commit from before
    assert pending_sessions(PipelinesConfig(), 0, 0, (), pafs.LocalFileSystem()).oldest_record_ms is None
