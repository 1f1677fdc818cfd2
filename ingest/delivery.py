"""Make records durable before the capture service acknowledges them: Kafka (acks=all) or the spool.

Direct mode: a request's records are produced with an idempotent producer and the request waits for
acks=all. If Kafka does not acknowledge in time, the records not yet acknowledged are appended to the
spool (fsync) and the service switches to spool mode: every later record is appended behind them, and
a drainer thread produces the spool in order when Kafka is back, committing its cursor only after
Kafka acknowledged. When the spool is empty again the service returns to direct mode. Order per
session is therefore kept; a record may arrive twice (at-least-once), and downstream dedupes on event_id.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from dataclasses import dataclass

from ingest.metrics import CaptureMetrics
from ingest.spool import Spool
from liverl.config.kafka import KafkaConfig

log = logging.getLogger("liverl.ingest.delivery")
HEADER_LENGTH = struct.Struct(">I")
DRAIN_BATCH = 500
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class Record:
    """One Kafka record and the event time it carries (for the end-to-end latency histogram)."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    event_time_ms: int = 0

    def encode(self) -> bytes:
        header = json.dumps({"topic": self.topic, "key": self.key.decode("utf-8"), "time": self.event_time_ms,
                             "headers": [[k, v.decode("utf-8")] for k, v in self.headers]}).encode()
        return HEADER_LENGTH.pack(len(header)) + header + self.value

    @staticmethod
    def decode(blob: bytes) -> "Record":
        (length,) = HEADER_LENGTH.unpack_from(blob)
        header = json.loads(blob[HEADER_LENGTH.size:HEADER_LENGTH.size + length])
        return Record(header["topic"], header["key"].encode("utf-8"), blob[HEADER_LENGTH.size + length:],
                      tuple((k, v.encode("utf-8")) for k, v in header["headers"]), header["time"])


class KafkaDelivery:
    def __init__(self, kafka: KafkaConfig, spool: Spool, metrics: CaptureMetrics, ack_timeout_s: float = 5.0):
        self.kafka = kafka
        self.spool = spool
        self.metrics = metrics
        self.ack_timeout_s = ack_timeout_s
        self._lock = threading.Lock()  # orders direct sends against spool appends
        self._producer = None
        self._spool_mode = not spool.empty()  # a restarted service first drains what it acknowledged before
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._drainer = threading.Thread(target=self._drain_loop, name="ingest-spool-drainer", daemon=True)

    def start(self) -> None:
        if not self._spool_mode:
            self._producer = self._try_new_producer()
            self._spool_mode = self._producer is None
        self._update_gauges()
        self._drainer.start()

    def deliver(self, records: list[Record]) -> None:
        """Return only once every record is in Kafka or fsync'd in the spool; raises SpoolFull otherwise."""
        if not records:
            return
        with self._lock:
            if self._spool_mode or self._producer is None:
                self._to_spool(records)
                return
            failed_from = self._produce_and_wait(self._producer, records)
            if failed_from is not None:
                log.warning("kafka did not acknowledge within %.1f s; spooling %d records",
                            self.ack_timeout_s, len(records) - failed_from)
                self._drop_producer()
                self._spool_mode = True
                self._to_spool(records[failed_from:])

    def direct(self) -> bool:
        return not self._spool_mode

    def close(self, drain_timeout_s: float = 5.0) -> None:
        """Stop the drainer (what remains stays in the spool for the next start) and flush the producer."""
        deadline = time.monotonic() + drain_timeout_s
        while self._spool_mode and self._producer is not None and not self.spool.empty() \
                and time.monotonic() < deadline:  # a reachable Kafka gets a moment to take the spool
            time.sleep(0.05)
        self._stopping.set()
        self._wake.set()
        if self._drainer.is_alive():
            self._drainer.join(timeout=drain_timeout_s + self.ack_timeout_s)
        with self._lock:
            self._drop_producer(timeout_s=self.ack_timeout_s)
        self.spool.close()

    # --- internals ---------------------------------------------------------------------------

    def _to_spool(self, records: list[Record]) -> None:
        self.spool.append([r.encode() for r in records])
        self.metrics.spooled.inc(len(records))
        self._update_gauges()
        self._wake.set()

    def _produce_and_wait(self, producer, records: list[Record]) -> int | None:
        """Index of the first record Kafka did not acknowledge in time, or None when all were."""
        futures = []
        try:
            for record in records:
                futures.append(producer.send(record.topic, key=record.key or None, value=record.value,
                                             headers=list(record.headers)))
        except Exception as error:  # metadata timeout, closed producer, buffer full
            log.warning("kafka send failed: %s", error)
            return 0
        deadline = time.monotonic() + self.ack_timeout_s
        for index, future in enumerate(futures):
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as error:
                log.warning("kafka did not acknowledge record %d: %s", index, error)
                return index
        now_s = time.time()
        for record in records:
            if record.event_time_ms:
                self.metrics.end_to_end.observe(max(0.0, now_s - record.event_time_ms / 1000))
        return None

    def _drain_loop(self) -> None:
        backoff = 0.2
        while not self._stopping.is_set():
            if not self._spool_mode:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            if self._drain_once():
                backoff = 0.2
            else:
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _drain_once(self) -> bool:
        """Produce the next spooled chunk; True on progress (or on reaching the end)."""
        blobs, position = self.spool.read(DRAIN_BATCH)
        if not blobs:
            with self._lock:
                if self.spool.empty():
                    self._return_to_direct()
                return not self._spool_mode
        producer = self._producer or self._try_new_producer()
        if producer is None:
            return False
        self._producer = producer
        records = [Record.decode(blob) for blob in blobs]
        failed_from = self._produce_and_wait(producer, records)
        if failed_from is not None:
            with self._lock:
                self._drop_producer()  # a restarted broker may not know our producer id: start afresh
            return False
        self.spool.commit(position, len(records))
        self.metrics.drained.inc(len(records))
        with self._lock:
            if self.spool.empty():
                self._return_to_direct()
            self._update_gauges()
        return True

    def _return_to_direct(self) -> None:
        if self._producer is None:
            self._producer = self._try_new_producer()
        if self._producer is not None:
            self._spool_mode = False
            log.info("spool drained; producing to kafka directly again")
        self._update_gauges()

    def _try_new_producer(self):
        from kafka import KafkaProducer

        timeout_ms = int(self.ack_timeout_s * 1000)
        try:
            return KafkaProducer(
                **self.kafka.client_kwargs(), enable_idempotence=True, acks="all", linger_ms=2,
                request_timeout_ms=timeout_ms, delivery_timeout_ms=timeout_ms + 10, max_block_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms, reconnect_backoff_max_ms=1000,
            )
        except Exception as error:  # unreachable brokers: stay in spool mode and retry later
            if not self._spool_mode:
                log.warning("kafka unreachable (%s): spooling", error)
            return None

    def _drop_producer(self, timeout_s: float = 0.0) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=timeout_s)
            except Exception as error:
                log.warning("closing the kafka producer failed: %s", error)
            self._producer = None

    def _update_gauges(self) -> None:
        self.metrics.spool_depth.set(self.spool.pending())
        self.metrics.kafka_up.set(0 if self._spool_mode else 1)
