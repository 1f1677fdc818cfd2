"""Offset-range planning and reading on the real broker, through a real Beam pipeline."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.kafka_source import OffsetRange, ReadOffsetRange, high_water_marks, plan_ranges
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
