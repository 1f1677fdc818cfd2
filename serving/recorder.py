"""Record every completion as a ModelCall on Kafka, off the response path.

`record()` only puts the record on a bounded in-memory queue; a background thread sends it with an
idempotent producer. Whatever Kafka cannot take (down, timing out, queue full) goes to the disk
spool and is replayed later. Failures are counted, never raised to the request.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from pathlib import Path

from liverl.contracts import names
from liverl.v1 import model_call_pb2
from serving.metrics import ServingMetrics
from serving.spool import OutRecord, Spool

log = logging.getLogger("liverl.serving.recorder")

REPLAY_EVERY_S = 2.0
RECONNECT_EVERY_S = 5.0  # while Kafka is down, records go straight to the spool between attempts


class Recorder:
    def __init__(self, kafka_config, spool_dir: Path, metrics: ServingMetrics, queue_size: int = 10000,
                 spool_max_bytes: int = 1 << 30):
        self._kafka = kafka_config
        self._metrics = metrics
        self._queue: queue.Queue[OutRecord] = queue.Queue(maxsize=queue_size)
        self.spool = Spool(spool_dir, spool_max_bytes)
        self._producer = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="modelcall-recorder", daemon=True)
        self._last_replay = 0.0
        self._next_connect = 0.0

    def start(self) -> "Recorder":
        self._thread.start()
        return self

    # -- the request side: O(1), never raises ------------------------------------------------------

    def record(self, call: model_call_pb2.ModelCall) -> None:
        headers = ((names.HEADER_SCHEMA_VERSION, str(names.EVENT_SCHEMA_VERSION).encode()),
                   (names.HEADER_TENANT, call.tenant_id.encode()),
                   (names.HEADER_KIND, b"model-call"))
        self._enqueue(OutRecord(self._kafka.model_calls_topic, call.session_id.encode(), call.SerializeToString(),
                                headers, time.time()))

    def dead_letter(self, reason: str, message: str, tenant_id: str, session_id: str, payload: bytes) -> None:
        """A bad request, for the dead-letter topic (contract 1's JSON shape)."""
        import base64

        value = json.dumps({"reason": reason, "message": message, "source": "serving", "tenant_id": tenant_id,
                            "session_id": session_id, "payload_b64": base64.b64encode(payload).decode("ascii"),
                            "at_ms": int(time.time() * 1000)}).encode()
        headers = ((names.HEADER_SCHEMA_VERSION, str(names.EVENT_SCHEMA_VERSION).encode()),
                   (names.HEADER_TENANT, tenant_id.encode()), (names.HEADER_KIND, b"dead-letter"))
        self._metrics.dead_letters.labels(reason).inc()
        self._enqueue(OutRecord(self._kafka.dead_letters_topic, session_id.encode(), value, headers, time.time()))

    def _enqueue(self, record: OutRecord) -> None:
        try:
            self._queue.put_nowait(record)
            self._metrics.recording_queue.set(self._queue.qsize())
        except queue.Full:
            self._to_spool(record)
        except Exception:  # never surface recording trouble to the request
            self._metrics.records.labels("failed").inc()

    # -- the background side ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            try:
                record = self._queue.get(timeout=0.2)
            except queue.Empty:
                record = None
            if record is not None:
                self._metrics.recording_queue.set(self._queue.qsize())
                self._send(record)
            if self.spool.pending() and time.monotonic() - self._last_replay > REPLAY_EVERY_S:
                self._last_replay = time.monotonic()
                self._maybe_replay()

    def _send(self, record: OutRecord) -> None:
        producer = self._producer_or_none()
        if producer is None or self.spool.pending():  # behind spooled records: keep each session's order
            self._to_spool(record)
            return
        try:
            future = producer.send(record.topic, key=record.key, value=record.value, headers=list(record.headers))
        except Exception as error:  # metadata timeout, closed producer, ...
            log.warning("recording: send failed (%s); spooling", error)
            self._to_spool(record)
            self._drop_producer()
            return
        future.add_callback(lambda _meta: self._sent(record))
        future.add_errback(lambda error: self._failed(record, error))

    def _sent(self, record: OutRecord) -> None:
        self._metrics.records.labels("sent").inc()
        if record.finished_at:
            self._metrics.recording_lag.observe(max(0.0, time.time() - record.finished_at))

    def _failed(self, record: OutRecord, error) -> None:
        log.warning("recording: Kafka refused a record (%s); spooling", error)
        self._to_spool(record)

    def _to_spool(self, record: OutRecord) -> None:
        try:
            if self.spool.append(record):
                self._metrics.records.labels("spooled").inc()
            else:
                self._metrics.records.labels("dropped").inc()
        except Exception:
            self._metrics.records.labels("dropped").inc()
        self._metrics.spool_bytes.set(self.spool.size())

    def _maybe_replay(self) -> None:
        if not self.spool.pending():
            return
        producer = self._producer_or_none()
        if producer is None:
            return

        def send_all(records: list[OutRecord]) -> None:
            futures = [producer.send(r.topic, key=r.key, value=r.value, headers=list(r.headers)) for r in records]
            for future in futures:
                future.get(timeout=30)

        try:
            replayed = self.spool.replay(send_all)
            self._metrics.records.labels("replayed").inc(replayed)
            if replayed:
                log.info("recording: replayed %d spooled records", replayed)
        except Exception as error:
            log.warning("recording: spool replay failed (%s); will retry", error)
            self._drop_producer()
        self._metrics.spool_bytes.set(self.spool.size())

    def _producer_or_none(self):
        if self._producer is not None:
            return self._producer
        if time.monotonic() < self._next_connect or self._stop.is_set():
            return None
        try:
            from kafka import KafkaProducer

            self._producer = KafkaProducer(**self._kafka.client_kwargs(), enable_idempotence=True, acks="all",
                                           linger_ms=5, max_block_ms=5000, request_timeout_ms=10000,
                                           delivery_timeout_ms=30000, bootstrap_timeout_ms=5000,
                                           reconnect_backoff_max_ms=2000)
        except Exception as error:  # broker down: spool, try again later
            log.warning("recording: Kafka unavailable (%s); spooling", error)
            self._producer = None
            self._next_connect = time.monotonic() + RECONNECT_EVERY_S
        return self._producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        self._next_connect = time.monotonic() + RECONNECT_EVERY_S
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:
                pass

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until the queue is empty and Kafka acknowledged what was sent (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._producer is not None:
            try:
                self._producer.flush(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                return False
        return self._queue.empty()

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self._drop_producer()
