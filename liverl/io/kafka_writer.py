"""Write records to Kafka and never lose one the caller was told is written: Kafka (acks=all) or the spool.

Direct mode: `write()` produces with an idempotent producer and waits for acks=all. If Kafka does not
acknowledge in time, the records not yet acknowledged are appended to the durable spool and the writer
switches to spool mode: every later record is appended behind them, and a drainer thread produces the
spool in order when Kafka is back, committing the spool's cursor only after Kafka acknowledged. When the
spool is empty again the writer returns to direct mode. Order per key is therefore kept; a record may
arrive twice (at-least-once), and consumers dedupe on the event id every record carries.

The producer underneath is librdkafka's (confluent-kafka): idempotent, waiting for acks=all, and picking a keyed
record's partition by murmur2 of its key, as the Java client and kafka-python do.

Stages feed their own metrics through a `WriterListener`; nothing here knows what the records mean.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from liverl.config.kafka import KafkaConfig
from liverl.io.backoff import Backoff
from liverl.io.spool import Spool

log = logging.getLogger("liverl.io.kafka_writer")

ENVELOPE = struct.Struct(">BqHIH")  # format version, event time (ms), topic length, key length, header count
HEADER_ENTRY = struct.Struct(">HI")  # header name length, header value length
ENVELOPE_VERSION = 1
DRAIN_BATCH = 500
MAX_BACKOFF_S = 5.0
# A write waits for acks=all anyway and then flushes, so its records need not wait for linger to form batches:
# a long linger packs one write into one batch per partition instead of a batch every few milliseconds.
LINGER_MS = 100


@dataclass(frozen=True)
class Record:
    """One Kafka record and the time of what it reports (for latency metrics; 0 when unknown)."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    event_time_ms: int = 0

    def encode(self) -> bytes:
        """The record as one spool payload (binary: keys and header values may be any bytes)."""
        topic = self.topic.encode("utf-8")
        parts = [ENVELOPE.pack(ENVELOPE_VERSION, self.event_time_ms, len(topic), len(self.key), len(self.headers)),
                 topic, self.key]
        for name, value in self.headers:
            encoded = name.encode("utf-8")
            parts += [HEADER_ENTRY.pack(len(encoded), len(value)), encoded, value]
        parts.append(self.value)
        return b"".join(parts)

    @staticmethod
    def decode(blob: bytes) -> "Record":
        version, event_time_ms, topic_length, key_length, header_count = ENVELOPE.unpack_from(blob)
        if version != ENVELOPE_VERSION:
            raise ValueError(f"spooled record has envelope version {version}, this code reads "
                             f"{ENVELOPE_VERSION}: drain the spool with the version that wrote it")
        at = ENVELOPE.size
        topic = blob[at:at + topic_length].decode("utf-8")
        at += topic_length
        key = blob[at:at + key_length]
        at += key_length
        headers = []
        for _ in range(header_count):
            name_length, value_length = HEADER_ENTRY.unpack_from(blob, at)
            at += HEADER_ENTRY.size
            name = blob[at:at + name_length].decode("utf-8")
            at += name_length
            headers.append((name, blob[at:at + value_length]))
            at += value_length
        return Record(topic, key, blob[at:], tuple(headers), event_time_ms)


class WriterListener:
    """Hooks a stage overrides to feed its own metrics; each default does nothing. They run on the
    caller's or the drainer's thread: keep them quick."""

    def acknowledged(self, records: list[Record], replayed: bool) -> None:
        """Kafka acknowledged records (replayed: they came from the spool)."""

    def spooled(self, records: list[Record]) -> None:
        """Records were appended to the spool (durably)."""

    def state_changed(self, writer: "KafkaWriter") -> None:
        """The mode or the spool's depth changed (read writer.direct(), writer.spool.stats())."""


PENDING = object()  # a record librdkafka has not reported on yet


class KafkaSettingsRefused(ValueError):
    """The Kafka settings cannot work with this client (retrying will not help)."""


class LibrdkafkaProducer:
    """confluent-kafka's idempotent producer: librdkafka's own threads build, batch and send the records, so
    the caller's thread only hands them over and reads the delivery reports (served by flush())."""

    def __init__(self, kafka: KafkaConfig, ack_timeout_s: float):
        from confluent_kafka import KafkaError, KafkaException, Producer

        timeout_ms = int(ack_timeout_s * 1000)
        settings = {
            **kafka.librdkafka_settings(),
            # idempotence: per-partition order and no duplicates across retries (tansu answers InitProducerId)
            "acks": "all", "enable.idempotence": True,
            "partitioner": "murmur2_random",  # keyed records: murmur2 as the Java client and kafka-python
            "linger.ms": LINGER_MS,  # flush() sends at once; see LINGER_MS
            # 1 MiB, the largest request most Kafka clients send by default (kafka-python's max_request_size)
            "message.max.bytes": 1_048_576,
            "request.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms + LINGER_MS + 10,
            "socket.connection.setup.timeout.ms": max(1000, timeout_ms), "reconnect.backoff.max.ms": 1000,
            "logger": logging.getLogger("liverl.io.librdkafka"),
        }
        try:
            self._producer = Producer(settings)
        except KafkaException as error:  # e.g. a SASL mechanism this librdkafka build lacks
            if error.args[0].code() == KafkaError._INVALID_ARG:
                raise KafkaSettingsRefused(f"librdkafka refuses the kafka settings: {error.args[0].str()}") from error
            raise
        try:
            self._producer.list_topics(timeout=ack_timeout_s)  # like kafka-python's bootstrap: fail when unreachable
        except Exception:
            self.close(0.0)
            raise

    def send_and_wait(self, records: list[Record], timeout_s: float) -> int | None:
        """Index of the first record Kafka did not acknowledge in time, or None when all were."""
        producer = self._producer
        deadline = time.monotonic() + timeout_s
        outcome: list = [PENDING] * len(records)  # per record: PENDING, None (acknowledged) or the KafkaError

        def report(index: int):
            return lambda error, _message: outcome.__setitem__(index, error)

        handed = 0
        try:
            for record in records:
                self._hand_over(record, report(handed), deadline)
                handed += 1
        except Exception as error:  # the queue stayed full, closed producer
            log.warning("kafka send failed: %s", error)
        producer.flush(max(0.0, deadline - time.monotonic()))  # sends now, without waiting out linger.ms
        for index in range(handed):
            if outcome[index] is not None:
                log.warning("kafka did not acknowledge record %d: %s", index,
                            "timed out" if outcome[index] is PENDING else outcome[index])
                return index
        return None if handed == len(records) else handed

    def _hand_over(self, record: Record, on_delivery, deadline: float) -> None:
        headers = list(record.headers) or None
        try:
            self._producer.produce(record.topic, record.value, record.key or None, headers=headers,
                                   on_delivery=on_delivery)
        except BufferError:  # the local queue is full: let librdkafka send some, then retry once
            self._producer.poll(min(0.1, max(0.0, deadline - time.monotonic())))
            self._producer.produce(record.topic, record.value, record.key or None, headers=headers,
                                   on_delivery=on_delivery)

    def close(self, timeout_s: float) -> None:
        """Deliver what is queued within timeout_s; drop the rest (the writer spooled it already)."""
        producer = self._producer
        if producer.flush(timeout_s):
            producer.purge()
            producer.flush(0)  # serve the purged records' reports
        producer.close()


class KafkaWriter:
    """An idempotent librdkafka producer in front of a durable spool; thread-safe."""

    def __init__(self, kafka: KafkaConfig, spool: Spool, ack_timeout_s: float = 5.0,
                 listener: WriterListener | None = None, name: str = "kafka-writer",
                 seal: Callable[[list[Record]], list[Record]] | None = None):
        """seal: applied to every record before it is sent or spooled (liverl.privacy.sealing.Sealer.seal_all:
        values sealed with their subject's key, records of forgotten subjects dropped); None: as given."""
        self.kafka = kafka
        self.seal = seal
        self.spool = spool
        self.ack_timeout_s = ack_timeout_s
        self.listener = listener or WriterListener()
        self._lock = threading.Lock()  # orders direct sends against spool appends
        self._producer = None
        self._spool_mode = not spool.empty()  # a restarted writer first drains what it accepted before
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._drainer = threading.Thread(target=self._drain_loop, name=f"{name}-drainer", daemon=True)

    def start(self) -> "KafkaWriter":
        """Connect (waits up to ack_timeout_s when Kafka is unreachable, then spools) and start draining."""
        if not self._spool_mode:
            self._producer = self._try_new_producer()
            self._spool_mode = self._producer is None
        self.listener.state_changed(self)
        self._drainer.start()
        return self

    def write(self, records: list[Record]) -> None:
        """Return only once every record is acknowledged by Kafka or durable in the spool; raises SpoolFull
        (nothing of what was not acknowledged is kept then) when the spool has no room."""
        if self.seal is not None:
            records = self.seal(records)
        if not records:
            return
        with self._lock:
            if self._spool_mode or self._producer is None:
                self._to_spool(records)
                return
            failed_from = self._produce_and_wait(self._producer, records)
            if failed_from is None:
                self.listener.acknowledged(records, replayed=False)
                return
            log.warning("kafka did not acknowledge within %.1f s; spooling %d records",
                        self.ack_timeout_s, len(records) - failed_from)
            if failed_from:
                self.listener.acknowledged(records[:failed_from], replayed=False)
            self._drop_producer()
            self._spool_mode = True
            self._to_spool(records[failed_from:])

    def park(self, records: list[Record]) -> None:
        """Append to the spool without trying Kafka or waiting for a write in flight (for a caller that
        cannot wait, e.g. an overflowing request path); later writes queue behind them. Raises SpoolFull
        when the spool has no room."""
        if self.seal is not None:
            records = self.seal(records)
        if not records:
            return
        self._spool_mode = True
        self._to_spool(records)
        self._spool_mode = True  # the drainer may have just found the spool empty: the loop re-checks too

    def direct(self) -> bool:
        """True while records go straight to Kafka; False while they go to the spool."""
        return not self._spool_mode

    def close(self, drain_timeout_s: float = 5.0) -> None:
        """Stop the drainer (what remains stays in the spool for the next start) and flush the producer."""
        deadline = time.monotonic() + drain_timeout_s
        while self._spool_mode and self._producer is not None and not self.spool.empty() \
                and self._drainer.is_alive() and time.monotonic() < deadline:  # a reachable Kafka takes the spool
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
        self.listener.spooled(records)
        self.listener.state_changed(self)
        self._wake.set()

    def _produce_and_wait(self, producer, records: list[Record]) -> int | None:
        """Index of the first record Kafka did not acknowledge in time, or None when all were."""
        return producer.send_and_wait(records, self.ack_timeout_s)

    def _drain_loop(self) -> None:
        backoff = Backoff(first_s=0.2, cap_s=MAX_BACKOFF_S)
        while not self._stopping.is_set():
            if not self._spool_mode:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                if not self.spool.empty():  # parked while returning to direct mode: drain it
                    self._spool_mode = True
                continue
            try:
                progressed = self._drain_once()
            except Exception:  # a disk error must not kill the drainer: retry with backoff
                log.exception("draining the spool failed; retrying")
                progressed = False
            if progressed:
                backoff.reset()
            else:
                self._stopping.wait(backoff.next_delay())

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
        self.listener.acknowledged(records, replayed=True)
        with self._lock:
            if self.spool.empty():
                self._return_to_direct()
            self.listener.state_changed(self)
        return True

    def _return_to_direct(self) -> None:
        if self._producer is None:
            self._producer = self._try_new_producer()
        if self._producer is not None:
            self._spool_mode = False
            log.info("spool drained; producing to kafka directly again")
        self.listener.state_changed(self)

    def _try_new_producer(self):
        try:
            return LibrdkafkaProducer(self.kafka, self.ack_timeout_s)
        except KafkaSettingsRefused:
            raise
        except Exception as error:  # unreachable brokers: stay in spool mode and retry later
            if not self._spool_mode:
                log.warning("kafka unreachable (%s): spooling", error)
            return None

    def _drop_producer(self, timeout_s: float = 0.0) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout_s)
            except Exception as error:
                log.warning("closing the kafka producer failed: %s", error)
            self._producer = None
