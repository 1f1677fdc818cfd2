"""Record every completion as a ModelCall on Kafka, off the response path.

`record_later()` only hands a builder of the record to a bounded in-memory hand-off; a background thread
builds (the ModelCall, its redaction, its bytes) and hands batches to liverl.io's KafkaWriter, which
waits for Kafka (acks=all) or appends to the durable disk spool and replays it in order later. So the
request path pays one deque append, not a protobuf message and a redaction scan. A full hand-off overflows
straight to the spool (built on the spot). Failures are counted, never raised to the request.
A call that names a user is linked to its session in the key store by the same thread, before its batch is
written (serving.recording.subjects): one append per batch and tenant, off the request path (but for an overflow, which
is built on the spot anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter

from liverl.config.kafka import KafkaConfig
from liverl.config.serving import ServingConfig
from liverl.io import records as kafka_records
from liverl.io.kafka_writer import KafkaWriter, Record, WriterListener
from liverl.io.spool import Spool, SpoolFull
from liverl.redaction.error_log import log_unexpected
from liverl.v1 import model_call_pb2, session_event_pb2
from serving.metrics import ServingMetrics
from serving.recording.handoff import BatchHandoff
from serving.recording.subjects import Links, ServingSubjects

log = logging.getLogger("liverl.serving.recorder")

SEND_BATCH = 500
ACK_TIMEOUT_S = 5.0
_DEFAULTS = ServingConfig.model_fields  # the serving.* settings' defaults live there, once
RECENT_LAGS = 100_000  # exact lags of the latest records, for quantiles the histogram's buckets only bound


@dataclass(frozen=True)
class _Pending:
    """A ModelCall (or, kind SESSION_EVENT, a SessionEvent) still to build, when its completion finished (when
    the event happened), and its user as the caller named it ("": none)."""

    build: Callable[[], model_call_pb2.ModelCall | session_event_pb2.SessionEvent]
    finished_ms: int
    user_id: str = ""
    kind: bytes = kafka_records.MODEL_CALL


class _RecordingListener(WriterListener):
    def __init__(self, metrics: ServingMetrics):
        self.metrics = metrics
        self.recent_lags_s: deque[float] = deque(maxlen=RECENT_LAGS)

    def acknowledged(self, records: list[Record], replayed: bool) -> None:
        if replayed:
            self.metrics.records.labels("replayed").inc(len(records))
            return
        self.metrics.records.labels("sent").inc(len(records))
        now_ms = time.time() * 1000
        for record in records:
            if record.event_time_ms:
                lag_s = max(0.0, (now_ms - record.event_time_ms) / 1000)
                self.metrics.recording_lag.observe(lag_s)
                self.recent_lags_s.append(lag_s)

    def spooled(self, records: list[Record]) -> None:
        self.metrics.records.labels("spooled").inc(len(records))

    def state_changed(self, writer: KafkaWriter) -> None:
        self.metrics.spool_bytes.set(writer.spool.size_bytes())


class Recorder:
    def __init__(self, kafka_config: KafkaConfig, spool_dir: Path, metrics: ServingMetrics,
                 queue_size: int = _DEFAULTS["record_queue_size"].default,
                 spool_max_bytes: int = _DEFAULTS["spool_max_bytes"].default,
                 linger_s: float = _DEFAULTS["record_linger_s"].default, seal=None,
                 subjects: ServingSubjects | None = None):
        """seal: see KafkaWriter (each record sealed with its session's key before Kafka or the spool).
        subjects: links each call's user to its session (None: the users of calls are not linked)."""
        self._kafka = kafka_config
        self.subjects = subjects
        self._metrics = metrics
        self._handoff: BatchHandoff[Record | _Pending] = BatchHandoff(queue_size, linger_s)
        # Registered here rather than in ServingMetrics, which belongs to the server's own metrics set.
        corrupt = Counter("liverl_serving_spool_corrupt_frames", "Corrupt spool frames quarantined (and skipped).",
                          registry=metrics.registry)
        self.spool = Spool(spool_dir, spool_max_bytes, on_corrupt=lambda _frame: corrupt.inc())
        corrupt.inc(self.spool.stats().corrupt_frames)  # found while the spool was opened
        self._listener = _RecordingListener(metrics)
        self.writer = KafkaWriter(kafka_config, self.spool, ACK_TIMEOUT_S, self._listener, name="modelcall-recorder",
                                  seal=seal)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="modelcall-recorder", daemon=True)

    @property
    def lags_s(self) -> deque[float]:
        """Completion finished -> acknowledged by Kafka, in seconds, of the latest records sent directly."""
        return self._listener.recent_lags_s

    def start(self) -> "Recorder":
        self._thread.start()
        return self

    # -- the request side: O(1) unless the queue overflows, never raises -----------------------------

    def record_later(self, build: Callable[[], model_call_pb2.ModelCall], finished_ms: int,
                     user_id: str = "") -> None:
        """Record the ModelCall build() returns; build runs on the recording thread (it must only read
        what no longer changes). finished_ms: when the completion finished (the recording lag's start).
        user_id: the call's user as the caller named it, linked to the session as its pseudonym."""
        self._enqueue(_Pending(build, finished_ms, user_id))

    def record_event_later(self, build: Callable[[], session_event_pb2.SessionEvent], event_time_ms: int) -> None:
        """Record on the session-events topic the SessionEvent build() returns (built, like a ModelCall, on the
        recording thread): what serving itself saw of a session outside the model, such as a stitched call's
        tool results linked to the tool calls they answer (serving.recording.stitching)."""
        self._enqueue(_Pending(build, event_time_ms, kind=kafka_records.SESSION_EVENT))

    def _model_call_record(self, call: model_call_pb2.ModelCall, finished_ms: int) -> Record:
        return kafka_records.session_record(self._kafka.model_calls_topic, kafka_records.MODEL_CALL, call.tenant_id,
                                            call.session_id, call.SerializeToString(), finished_ms)

    def dead_letter(self, reason: str, message: str, tenant_id: str, session_id: str, payload: bytes) -> None:
        """A bad request, for the dead-letter topic (liverl/io/records.py: its JSON envelope)."""
        now_ms = int(time.time() * 1000)
        self._metrics.dead_letters.labels(reason).inc()
        self._enqueue(kafka_records.dead_letter(self._kafka.dead_letters_topic, source="serving", reason=reason,
                                                message=message, tenant_id=tenant_id, session_id=session_id,
                                                payload=payload, at_ms=now_ms, event_time_ms=now_ms))

    def _enqueue(self, item: Record | _Pending) -> None:
        try:
            if not self._handoff.put(item):  # full: straight to the spool
                links: Links = {}
                record = self._built(item, links)
                self._link(links)
                if record is not None:
                    self._park([record])
        except Exception:  # never surface recording trouble to the request
            self._metrics.records.labels("failed").inc()

    def _built(self, item: Record | _Pending, links: Links) -> Record | None:
        """The Kafka record of a queued item, its user's link added to links; None (counted) when building it
        failed or its user was forgotten."""
        if isinstance(item, Record):
            return item
        try:
            call = item.build()
        except Exception as error:  # a call's prompt and completion are in scope: no traceback in the log
            log_unexpected(log, "recording: building a ModelCall failed", error)
            self._metrics.records.labels("failed").inc()
            return None
        if item.kind == kafka_records.SESSION_EVENT:
            return kafka_records.session_record(self._kafka.session_events_topic, kafka_records.SESSION_EVENT,
                                                call.tenant_id, call.session_id, call.SerializeToString(),
                                                item.finished_ms)
        if item.user_id and self.subjects is not None and not self._add_link(call, item.user_id, links):
            self._metrics.records.labels("forgotten").inc()
            return None
        return self._model_call_record(call, item.finished_ms)

    def _add_link(self, call: model_call_pb2.ModelCall, user_id: str, links: Links) -> bool:
        """False when the call's user was forgotten; True otherwise, also when the key store could not be read
        (the record is kept, and the failure counted: a link may be missing, a record never is)."""
        try:
            return self.subjects.add(call.tenant_id, user_id, call.session_id, links)
        except Exception as error:  # no user id in the log line: the error's type only
            log.warning("recording: a call's user could not be linked to its session (%s)", type(error).__name__)
            self._metrics.user_links.labels("failed").inc()
            return True

    def _link(self, links: Links) -> None:
        """Write a batch's (user, session) links to the key store; a failure is counted and logged, never raised."""
        if not links:
            return
        pairs = sum(len(tenant_pairs) for tenant_pairs in links.values())
        try:
            self.subjects.write(links)
        except Exception as error:  # the pairs are pseudonyms, but the log line needs none of them
            log.warning("recording: %d (user, session) links not written to the key store (%s)", pairs,
                        type(error).__name__)
            self._metrics.user_links.labels("failed").inc(pairs)
        else:
            self._metrics.user_links.labels("linked").inc(pairs)

    def _park(self, records: list[Record]) -> None:
        """Into the spool, behind whatever waits there already; counted as dropped when it has no room."""
        try:
            self.writer.park(records)
        except SpoolFull as error:
            log.warning("recording: spool full, %d records dropped (%s)", len(records), error)
            self._metrics.records.labels("dropped").inc(len(records))
        except Exception:
            log.exception("recording: spooling failed")
            self._metrics.records.labels("dropped").inc(len(records))

    # -- the background side ---------------------------------------------------------------------

    def _run(self) -> None:
        self.writer.start()  # may wait for an unreachable Kafka: here, not in the caller of start()
        while not self._stop.is_set() or not self._handoff.idle():
            batch = self._handoff.take(SEND_BATCH, timeout_s=0.2)
            if not batch:
                continue
            self._metrics.recording_queue.set(self._handoff.waiting())
            try:
                links: Links = {}
                records = [record for record in (self._built(item, links) for item in batch) if record is not None]
                self._link(links)  # before Kafka: a link without its record is harmless, a record unlinked is not
                self._write(records)
            finally:
                self._handoff.done()

    def _write(self, batch: list[Record]) -> None:
        try:
            self.writer.write(batch)  # acknowledged by Kafka or durable in the spool
        except SpoolFull as error:
            log.warning("recording: Kafka down and spool full, %d records dropped (%s)", len(batch), error)
            self._metrics.records.labels("dropped").inc(len(batch))
        except Exception:
            log.exception("recording: writing %d records failed", len(batch))
            self._metrics.records.labels("failed").inc(len(batch))

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued record is acknowledged by Kafka or in the spool (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while not self._handoff.idle() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self._handoff.idle()

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        self.writer.close(drain_timeout_s=min(timeout_s, ACK_TIMEOUT_S))
