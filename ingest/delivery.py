"""Make records durable before the capture service acknowledges them: Kafka (acks=all) or the spool.

The mechanics (direct mode, spool mode, in-order replay, at-least-once with dedupe on event_id downstream)
are liverl.io.kafka_writer's; this module feeds the capture service's metrics from them.
"""

from __future__ import annotations

import time

from prometheus_client import Counter

from ingest.metrics import CaptureMetrics
from liverl.config.kafka import KafkaConfig
from liverl.io.kafka_writer import KafkaWriter, Record, WriterListener
from liverl.io.spool import CorruptFrame, Spool

__all__ = ["KafkaDelivery", "Record"]


class _CaptureListener(WriterListener):
    def __init__(self, metrics: CaptureMetrics):
        self.metrics = metrics

    def acknowledged(self, records: list[Record], replayed: bool) -> None:
        if replayed:
            self.metrics.drained.inc(len(records))
        now_s = time.time()
        for record in records:
            if record.event_time_ms:
                self.metrics.end_to_end.observe(max(0.0, now_s - record.event_time_ms / 1000))

    def spooled(self, records: list[Record]) -> None:
        self.metrics.spooled.inc(len(records))

    def state_changed(self, writer: KafkaWriter) -> None:
        self.metrics.spool_depth.set(writer.spool.pending())
        self.metrics.kafka_up.set(1 if writer.direct() else 0)


class KafkaDelivery(KafkaWriter):
    """The capture service's KafkaWriter: `deliver()` returns once every record is in Kafka or fsync'd."""

    def __init__(self, kafka: KafkaConfig, spool: Spool, metrics: CaptureMetrics, ack_timeout_s: float = 5.0,
                 seal=None):
        """seal: see KafkaWriter (the records sealed with their subjects' keys before Kafka or the spool)."""
        super().__init__(kafka, spool, ack_timeout_s, _CaptureListener(metrics), name="ingest-spool", seal=seal)
        self.metrics = metrics
        # Registered here rather than in CaptureMetrics, which belongs to the service's own metrics set.
        corrupt = Counter("liverl_ingest_spool_corrupt_frames", "Corrupt spool frames quarantined (and skipped).",
                          registry=metrics.registry)
        corrupt.inc(spool.stats().corrupt_frames)  # found while the spool was opened

        def count(_frame: CorruptFrame) -> None:
            corrupt.inc()

        spool.on_corrupt = count

    def deliver(self, records: list[Record]) -> None:
        """Return only once every record is in Kafka or fsync'd in the spool; raises SpoolFull otherwise."""
        self.write(records)
