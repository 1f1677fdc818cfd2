"""Reading Kafka in Beam without the Java KafkaIO: offset ranges planned on the driver, read by workers.

The driver fixes, per partition, [start, end): start is where the last committed batch stopped, end the
high-water mark seen by a fetch (never `end_offsets`, which some brokers report wrongly). Ranges are split
into chunks, so `beam.Create(ranges) | Reshuffle | ParDo(ReadOffsetRange)` spreads reading over workers on
any runner. Reading a fixed range makes a batch a pure function of the log: a re-run reads the same records.

Retention gaps: when Kafka's retention deleted offsets the table expects (the next offset to read is below the
partition's earliest available offset), the records are gone for good. The planner finds such gaps
(`find_retention_gaps`), and so does a worker whose planned range was deleted after planning; under
pipelines.on_retention_gap "skip" each gap becomes a `retention_gap` dead letter (topic, partition, expected
offset, earliest available, records lost) and reading resumes at the earliest offset; under "fail" the batch
stops with RetentionGapError saying what to do.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import NamedTuple

import apache_beam as beam

from pipelines import dead_letters
from pipelines.records import RawRecord

GAP = "retention_gap"  # tagged output of ReadOffsetRange: dead letters of gaps found while reading
WORKERS_NAMESPACE = "distill.workers"  # one counter per worker process ("host:pid"): the records it read
SKIP, FAIL = "skip", "fail"  # pipelines.on_retention_gap

log = logging.getLogger(__name__)


class RetentionGap(NamedTuple):
    topic: str
    partition: int
    expected: int  # the next offset the table expected to read
    earliest: int  # the earliest offset the broker still holds (reading resumes here)

    @property
    def records_lost(self) -> int:
        return self.earliest - self.expected

    def describe(self) -> str:
        return (f"Kafka retention deleted {self.records_lost} records of {self.topic}[{self.partition}] before they "
                f"were distilled: the table expects offset {self.expected}, the earliest available is {self.earliest}")

    def dead_letter(self) -> dict:
        """The gap as a dead-letter row (payload: the numbers as JSON); the batch fields are filled at commit."""
        return dead_letters.partition_dead_letter(
            dead_letters.RETENTION_GAP, self.describe(), self.topic, self.partition, self.expected,
            {"topic": self.topic, "partition": self.partition, "expected_offset": self.expected,
             "earliest_offset": self.earliest, "records_lost": self.records_lost})


class RetentionGapError(RuntimeError):
    """Retention deleted records the table had not read, and pipelines.on_retention_gap is "fail"."""

    def __init__(self, gaps: list[RetentionGap]):
        self.gaps = gaps
        super().__init__(
            "; ".join(gap.describe() for gap in gaps) + ". These records cannot be distilled any more. To continue "
            "without them and record the loss as retention_gap dead letters, set pipelines.on_retention_gap = "
            "\"skip\" (or --pipelines.on_retention_gap skip) and re-run; to prevent it, raise the topics' "
            "retention.ms (kafka.topic_retention_ms) above the longest time the distiller may be stopped.")


def record_gaps(gaps: list[RetentionGap], policy: str) -> None:
    """The audit log line of each gap; raise RetentionGapError under the "fail" policy."""
    for gap in gaps:
        log.warning("retention gap: %s (policy %s)", gap.describe(), policy)
    if gaps and policy == FAIL:
        raise RetentionGapError(gaps)


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


def earliest_offsets(client_kwargs: dict, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """{(topic, partition): the earliest offset the broker still holds} (ListOffsets, earliest)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_kwargs, group_id=None, enable_auto_commit=False)
    try:
        found = consumer.beginning_offsets([TopicPartition(t, p) for t, p in partitions])
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}
    finally:
        consumer.close()


def find_retention_gaps(starts: dict[tuple[str, int], int], earliest: dict[tuple[str, int], int],
                        marks: dict[tuple[str, int], int]) -> list[RetentionGap]:
    """Committed partitions whose next offset is below the earliest one still on the broker.

    A partition the table has never read is not a gap: a first batch starts at the log start.
    """
    gaps = []
    for (topic, partition), expected in sorted(starts.items()):
        first = earliest.get((topic, partition), 0)
        if expected < first:
            mark = marks.get((topic, partition), first)
            gaps.append(RetentionGap(topic, partition, expected, min(first, max(mark, expected))))
    return gaps


def plan_ranges(marks: dict[tuple[str, int], int], starts: dict[tuple[str, int], int],
                earliest: dict[tuple[str, int], int] | None = None) -> list[OffsetRange]:
    """One range per partition up to the high-water mark, from the committed start (a new partition: the log
    start), never below the earliest offset the broker holds (the part below is a RetentionGap)."""
    earliest = earliest or {}
    ranges = []
    for (topic, partition), mark in sorted(marks.items()):
        start = max(starts.get((topic, partition), 0), earliest.get((topic, partition), 0))
        ranges.append(OffsetRange(topic, partition, min(start, max(mark, starts.get((topic, partition), 0))), mark))
    return ranges


class ReadOffsetRange(beam.DoFn):
    """OffsetRange -> the RawRecords at offsets [start, end) of that partition, in order.

    Tagged output GAP: the dead letter of a retention gap met while reading (records deleted after the batch
    was planned), under the "skip" policy; "fail" raises RetentionGapError.
    client_kwargs may carry files shipped from the driver (pipelines.portability); they are unpacked here.
    """

    def __init__(self, client_kwargs: dict, timeout_s: float, on_retention_gap: str = SKIP):
        self._client_kwargs = client_kwargs
        self._timeout_s = timeout_s
        self._on_retention_gap = on_retention_gap
        self._consumer = None
        self._unpacked: list[str] = []
        self.records_read = beam.metrics.Metrics.counter("distill", "records_read")
        self.records_lost = beam.metrics.Metrics.counter("distill", "retention_gap_records")

    def setup(self):
        from kafka import KafkaConsumer

        from pipelines.portability import unpack_client_files

        kwargs, self._unpacked = unpack_client_files(self._client_kwargs)
        self._consumer = KafkaConsumer(**kwargs, group_id=None, enable_auto_commit=False, auto_offset_reset="none")
        # Which worker process read how much: the batch report shows how the ranges spread over workers.
        self.read_here = beam.metrics.Metrics.counter(WORKERS_NAMESPACE, f"{socket.gethostname()}:{os.getpid()}")

    def process(self, offset_range: OffsetRange):
        from kafka import TopicPartition
        from kafka.errors import OffsetOutOfRangeError

        if offset_range.end <= offset_range.start:
            return
        tp = TopicPartition(offset_range.topic, offset_range.partition)
        consumer = self._consumer
        consumer.assign([tp])
        consumer.seek(tp, offset_range.start)
        last_progress = time.monotonic()
        # position() skips gaps (transaction markers, compaction), so it, not the record count, ends the loop.
        next_offset, read_here = offset_range.start, 0
        while next_offset < offset_range.end and consumer.position(tp) < offset_range.end:
            try:
                batch = consumer.poll(timeout_ms=500).get(tp, [])
            except OffsetOutOfRangeError:
                gap = self._deleted_after_planning(tp, next_offset, offset_range.end)
                record_gaps([gap], self._on_retention_gap)
                self.records_lost.inc(gap.records_lost)
                yield beam.pvalue.TaggedOutput(GAP, gap.dead_letter())
                consumer.seek(tp, gap.earliest)
                next_offset = gap.earliest
                continue
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self._timeout_s:
                raise TimeoutError(
                    f"reading {offset_range} stalled at offset {consumer.position(tp)} for {self._timeout_s}s; "
                    "the batch is not committed and the next run retries it")
            for message in batch:
                if message.offset >= offset_range.end:
                    break
                read_here += 1
                next_offset = message.offset + 1
                yield RawRecord(message.topic, message.partition, message.offset, message.timestamp,
                                message.key, message.value, tuple((k, v) for k, v in (message.headers or ())))
        self.records_read.inc(read_here)  # once per range: a counter update per record costs more than it tells
        self.read_here.inc(read_here)

    def _deleted_after_planning(self, tp, expected: int, end: int) -> RetentionGap:
        """The gap behind an out-of-range fetch; re-raised when retention is not the cause."""
        from kafka.errors import OffsetOutOfRangeError

        earliest = self._consumer.beginning_offsets([tp])[tp]
        if earliest <= expected:
            raise OffsetOutOfRangeError(f"offset {expected} of {tp} is out of range but not below the earliest "
                                        f"offset {earliest}: was the topic deleted and re-created?")
        return RetentionGap(tp.topic, tp.partition, expected, min(earliest, end))

    def teardown(self):
        if self._consumer is not None:
            self._consumer.close()
        for path in self._unpacked:
            os.remove(path)
