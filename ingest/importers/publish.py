"""Publish built sessions to the capture path's topics, keyed as the capture service keys them.

Events go to kafka.session_events_topic and model calls to kafka.model_calls_topic, both keyed by
(tenant, session) with the contract's headers (liverl/io/records.py). Writes go through the
shared KafkaWriter: acknowledged by Kafka (acks=all) or kept in the import's own spool, which the next
`liverl import` drains first when Kafka was unreachable.
"""

from __future__ import annotations

from pathlib import Path

from ingest.importers.build import BuiltSession
from liverl.config.kafka import KafkaConfig
from liverl.io.kafka_writer import KafkaWriter, Record
from liverl.io.records import MODEL_CALL, SESSION_EVENT, session_record
from liverl.io.spool import Spool

MAX_RECORD_BYTES = 1_000_000  # below kafka-python's default max_request_size (1 MiB) with room for the key
ACK_TIMEOUT_S = 10.0


class RecordTooLarge(ValueError):
    pass


def records_of(built: BuiltSession, tenant: str, kafka: KafkaConfig) -> list[Record]:
    """The session's records, events first then calls (each topic keeps the session's order);
    RecordTooLarge when one would not fit a Kafka request (the whole session is then skipped). The key is
    the session id the records carry: built.session_id is the redacted one (a pseudonym when it held
    personal data), never the source's."""
    records = [session_record(kafka.session_events_topic, SESSION_EVENT, tenant, built.session_id,
                              e.SerializeToString(), e.event_time_ms) for e in built.events]
    records += [session_record(kafka.model_calls_topic, MODEL_CALL, tenant, built.session_id, c.SerializeToString(),
                               c.request_time_ms) for c in built.calls]
    for record in records:
        if len(record.value) > MAX_RECORD_BYTES:
            raise RecordTooLarge(f"a record of {len(record.value)} bytes is over the {MAX_RECORD_BYTES}-byte limit "
                                 "(a very long prompt?); cut the source's longest messages and import it again")
    return records


class Publisher:
    """A KafkaWriter over the import spool; use as a context manager."""

    def __init__(self, kafka: KafkaConfig, spool_dir: Path, seal=None):
        """seal: see KafkaWriter (records sealed with their sessions' keys; forgotten sessions dropped)."""
        self.kafka = kafka
        self.spool_dir = spool_dir
        self.seal = seal
        self.writer: KafkaWriter | None = None

    def __enter__(self) -> "Publisher":
        self.writer = KafkaWriter(self.kafka, Spool(self.spool_dir), ACK_TIMEOUT_S, name="import",
                                  seal=self.seal).start()
        return self

    def write(self, records: list[Record]) -> None:
        assert self.writer is not None, "use Publisher as a context manager"
        self.writer.write(records)

    def __exit__(self, *_) -> None:
        if self.writer is not None:
            self.writer.close(drain_timeout_s=ACK_TIMEOUT_S)

    def spooled(self) -> int:
        """Records left in the spool after close (Kafka unreachable): the next import sends them."""
        spool = Spool(self.spool_dir)
        try:
            return spool.pending()
        finally:
            spool.close()
