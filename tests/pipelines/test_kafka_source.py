"""Offset-range planning and reading on the real broker, through a real Beam pipeline."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import dead_letters
from pipelines.kafka_source import (
    FAIL,
    SKIP,
    OffsetRange,
    ReadOffsetRange,
    RetentionGap,
    RetentionGapError,
    earliest_offsets,
    find_retention_gaps,
    high_water_marks,
    plan_ranges,
    record_gaps,
)
from tests.pipelines.producing import produce


def test_ranges_split_into_chunks_are_read_exactly_once(distill_config):
    config = distill_config
    topic = config.kafka.session_events_topic
    produce(config, raw=[(topic, b"same-key", f"v{i}".encode(), ()) for i in range(10)])
    marks = high_water_marks(config.kafka.client_kwargs(), [topic], {})
    ranges = plan_ranges(marks, {(topic, p): 0 for p in range(2)})
    (busy,) = [r for r in ranges if r.end > 0]
    assert busy.end - busy.start == 10 and sum(r.end for r in ranges) == 10  # the true high-water mark

    resumed = OffsetRange(topic, busy.partition, 2, busy.end)  # a later batch resumes mid-partition
    chunks = resumed.split(3)
    assert [(c.start, c.end) for c in chunks] == [(2, 5), (5, 8), (8, 10)]
    with BeamTestPipeline() as pipeline:
        values = (pipeline | beam.Create(chunks) | beam.Reshuffle()
                  | beam.ParDo(ReadOffsetRange(config.kafka.client_kwargs(), timeout_s=20.0))
                  | beam.Map(lambda record: (record.offset, record.value, record.key)))
        assert_that(values, equal_to([(i, f"v{i}".encode(), b"same-key") for i in range(2, 10)]))


def test_the_broker_reports_each_partitions_earliest_offset(distill_config):
    """Real ListOffsets(earliest) round trip. tansu 0.6 never deletes records (no retention enforcement, and
    DeleteRecords drops the connection), so its log always starts at 0 even after records are produced."""
    config = distill_config
    topic = config.kafka.session_events_topic
    produce(config, raw=[(topic, b"k", b"v", ())])
    assert earliest_offsets(config.kafka.client_kwargs(), [(topic, 0), (topic, 1)]) == {(topic, 0): 0, (topic, 1): 0}


def test_retention_gaps_are_found_only_below_the_log_start_of_committed_partitions():
    starts = {("ev", 0): 10, ("ev", 1): 50}  # the table expects these next offsets
    earliest = {("ev", 0): 25, ("ev", 1): 40, ("ev", 2): 7}  # ev/2 was never read: a fresh start, not a gap
    marks = {("ev", 0): 30, ("ev", 1): 60, ("ev", 2): 9}
    (gap,) = find_retention_gaps(starts, earliest, marks)
    assert gap == RetentionGap("ev", 0, expected=10, earliest=25) and gap.records_lost == 15
    assert "deleted 15 records of ev[0]" in gap.describe()
    ranges = plan_ranges(marks, starts, earliest)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 25, 30), (1, 50, 60), (2, 7, 9)]
    letter = gap.dead_letter()
    assert (letter["reason"], letter["source_topic"], letter["source_partition"], letter["source_offset"]) == (
        dead_letters.RETENTION_GAP, "ev", 0, 10)
    assert json.loads(letter["payload"]) == {"topic": "ev", "partition": 0, "expected_offset": 10,
                                             "earliest_offset": 25, "records_lost": 15}
    with pytest.raises(RetentionGapError, match="on_retention_gap"):
        record_gaps([gap], FAIL)
    record_gaps([gap], SKIP)  # logs, does not raise
