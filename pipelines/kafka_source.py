"""Reading Kafka in Beam without the Java KafkaIO: offset ranges planned on the driver, read by workers.

The driver fixes, per partition, [start, end): start is where the last committed batch stopped, end the
high-water mark seen by a fetch (never `end_offsets`, which some brokers report wrongly). Ranges are split
into chunks, so `beam.Create(ranges) | Reshuffle | ParDo(ReadOffsetRange)` spreads reading over workers on
any runner. Reading a fixed range makes a batch a pure function of the log: a re-run reads the same records.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import apache_beam as beam

from pipelines.records import RawRecord


class OffsetRange(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    def split(self, chunk: int) -> list["OffsetRange"]:
        return [OffsetRange(self.topic, self.partition, first, min(first + chunk, self.end))
                for first in range(self.start, self.end, chunk)]


def high_water_marks(client_kwargs: dict, topics: list[str], starts: dict[tuple[str, int], int],
                     timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
    """{(topic, partition): high-water mark} from real fetch responses, for every partition of `topics`.

    Each partition is fetched from its `end_offsets` guess (at most one batch behind the true mark on
    brokers that get it wrong, exact on Kafka) so the fetch that reveals the mark reads little.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_kwargs, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        partitions = []
        for topic in topics:
            ids = consumer.partitions_for_topic(topic)
            if not ids:
                raise RuntimeError(f"topic {topic!r} does not exist; create it (`liverl up` does) or fix kafka.*_topic")
            partitions += [TopicPartition(topic, p) for p in sorted(ids)]
        consumer.assign(partitions)
        guesses = consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(starts.get((tp.topic, tp.partition), 0), guesses.get(tp) or 0))
        marks: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout_s
        while len(marks) < len(partitions):
            if time.monotonic() > deadline:
                missing = [f"{tp.topic}:{tp.partition}" for tp in partitions if (tp.topic, tp.partition) not in marks]
                raise TimeoutError(f"no fetch response for {missing} within {timeout_s}s; is the broker healthy?")
            consumer.poll(timeout_ms=200)
            for tp in partitions:
                mark = consumer.highwater(tp)
                if mark is not None and (tp.topic, tp.partition) not in marks:
                    marks[(tp.topic, tp.partition)] = mark
                    consumer.pause(tp)
        return marks
    finally:
        consumer.close()


def plan_ranges(marks: dict[tuple[str, int], int], starts: dict[tuple[str, int], int]) -> list[OffsetRange]:
    """One range per partition, from the committed start (0 for a new partition) to the high-water mark."""
    return [OffsetRange(topic, partition, starts.get((topic, partition), 0), mark)
            for (topic, partition), mark in sorted(marks.items())]


class ReadOffsetRange(beam.DoFn):
    """OffsetRange -> the RawRecords at offsets [start, end) of that partition, in order."""

    def __init__(self, client_kwargs: dict, timeout_s: float):
        self._client_kwargs = client_kwargs
        self._timeout_s = timeout_s
        self._consumer = None
        self.records_read = beam.metrics.Metrics.counter("distill", "records_read")

    def setup(self):
        from kafka import KafkaConsumer

        self._consumer = KafkaConsumer(**self._client_kwargs, group_id=None, enable_auto_commit=False,
                                       auto_offset_reset="none")

    def process(self, offset_range: OffsetRange):
        from kafka import TopicPartition

        if offset_range.end <= offset_range.start:
            return
        tp = TopicPartition(offset_range.topic, offset_range.partition)
        consumer = self._consumer
        consumer.assign([tp])
        consumer.seek(tp, offset_range.start)
        last_progress = time.monotonic()
        # position() skips gaps (transaction markers, compaction), so it, not the record count, ends the loop.
        while consumer.position(tp) < offset_range.end:
            batch = consumer.poll(timeout_ms=500).get(tp, [])
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self._timeout_s:
                raise TimeoutError(
                    f"reading {offset_range} stalled at offset {consumer.position(tp)} for {self._timeout_s}s; "
                    "the batch is not committed and the next run retries it")
            for message in batch:
                if message.offset >= offset_range.end:
                    break
                self.records_read.inc()
                yield RawRecord(message.topic, message.partition, message.offset, message.timestamp,
                                message.key, message.value, tuple((k, v) for k, v in (message.headers or ())))

    def teardown(self):
        if self._consumer is not None:
            self._consumer.close()
