"""Batch plans and the staging folder: the write-ahead files that make re-runs deterministic."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.kafka_source import OffsetRange, RetentionGap
from pipelines.records import RAW_RECORD_SCHEMA, RawRecord
from pipelines.state import BatchPlan, StateStore


def test_plan_round_trips_and_reports_offsets(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    plan = BatchPlan(seq=3, batch_id="g-00000003", as_of_ms=5,
                     ranges=(OffsetRange("ev", 0, 4, 9), OffsetRange("ev", 1, 0, 0), OffsetRange("mc", 0, 2, 3)),
                     carried_state=store.batch_dir(2), gaps=(RetentionGap("ev", 0, 1, 4),))
    assert store.load_plan(3) is None
    store.save_plan(plan)
    assert store.load_plan(3) == plan
    assert plan.offsets() == {"ev": {"0": [4, 9], "1": [0, 0]}, "mc": {"0": [2, 3]}}
    assert plan.new_records() == 6 and plan.has_news()
    older = {k: v for k, v in json.loads(plan.to_json()).items() if k != "gaps"}  # a plan written before gaps
    assert BatchPlan.from_json(json.dumps(older)).gaps == ()


def test_staged_pending_records_come_back_and_old_batches_are_pruned(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    record = RawRecord("ev", 1, 7, 11, b"k", b"v", (("h", b"1"),))
    for seq in (1, 2, 3):
        store.reset_batch_dir(seq)
        pq.write_table(pa.Table.from_pylist([record.to_row()], schema=RAW_RECORD_SCHEMA),
                       f"{store.batch_dir(seq)}/pending-00000-of-00001.parquet")
    assert store.count_staged(store.batch_dir(3), "pending") == 1 and store.count_staged(None, "pending") == 0
    rows = store.read_staged(store.batch_dir(3), "pending", RAW_RECORD_SCHEMA).to_pylist()
    assert [RawRecord.from_row(row) for row in rows] == [record]
    store.prune(committed_seq=3, keep=2)
    assert not (tmp_path / "state" / "batches" / f"{1:010d}").exists()
    assert (tmp_path / "state" / "batches" / f"{2:010d}").exists()


def test_a_staged_output_streams_its_files_and_reads_only_what_is_asked(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    store.reset_batch_dir(1)
    records = [RawRecord("ev", p, offset, 11, b"k", b"v", ()) for p in (0, 1) for offset in range(3)]
    for shard, part in enumerate((records[:3], records[3:])):
        pq.write_table(pa.Table.from_pylist([r.to_row() for r in part], schema=RAW_RECORD_SCHEMA),
                       f"{store.batch_dir(1)}/pending-{shard:05d}-of-00002.parquet")
    extra = pa.Table.from_pylist([RawRecord("mc", 0, 9, 12, None, b"x", ()).to_row()], schema=RAW_RECORD_SCHEMA)
    staged = store.open_staged(store.batch_dir(1), "pending", RAW_RECORD_SCHEMA).plus(extra)
    assert staged.num_rows() == 7
    assert staged.columns("topic").column_names == ["topic"]
    assert staged.columns("topic").column("topic").to_pylist() == ["ev"] * 6 + ["mc"]
    reader = staged.reader()
    assert reader.schema == RAW_RECORD_SCHEMA
    streamed = [RawRecord.from_row(row) for row in reader.read_all().to_pylist()]
    assert streamed == records + [RawRecord("mc", 0, 9, 12, None, b"x", ())]
    assert store.open_staged(store.batch_dir(1), "closed", RAW_RECORD_SCHEMA).num_rows() == 0
