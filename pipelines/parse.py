"""ParseRecord: RawRecord -> (session_id, Parsed) or a record-level dead letter."""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
from google.protobuf.message import DecodeError

from liverl import names
from liverl.v1.model_call_pb2 import ModelCall
from liverl.v1.session_event_pb2 import SessionEvent
from pipelines import dead_letters
from pipelines.records import RawRecord

EVENT = "event"
CALL = "call"
DEAD = "dead"


class Parsed(NamedTuple):
    kind: str  # EVENT | CALL
    record: RawRecord
    message: object  # SessionEvent | ModelCall

    @property
    def event_id(self) -> str:
        return self.message.event_id


def parse_record(record: RawRecord, events_topic: str, calls_topic: str) -> Parsed | dict:
    """The parsed record, or a dead-letter row saying what is wrong with it."""
    if record.topic == events_topic:
        kind, message_type = EVENT, SessionEvent
    elif record.topic == calls_topic:
        kind, message_type = CALL, ModelCall
    else:
        return dead_letters.record_dead_letter(
            dead_letters.UNKNOWN_TOPIC, f"record from unplanned topic {record.topic}", record, None)
    header_version = record.header(names.HEADER_SCHEMA_VERSION)
    try:
        if header_version is not None and int(header_version) > names.EVENT_SCHEMA_VERSION:
            return _unsupported(record, int(header_version))
        message = message_type.FromString(record.value or b"")
    except (DecodeError, ValueError) as error:
        return dead_letters.record_dead_letter(
            dead_letters.MALFORMED_EVENT, f"not a {message_type.__name__}: {error}", record, _key(record))
    if message.schema_version > names.EVENT_SCHEMA_VERSION:
        return _unsupported(record, message.schema_version)
    missing = [field for field in ("event_id", "session_id", "tenant_id") if not getattr(message, field)]
    if missing:
        return dead_letters.record_dead_letter(
            dead_letters.MALFORMED_EVENT, f"{message_type.__name__} without {', '.join(missing)}", record,
            message.session_id or _key(record))
    if kind == EVENT and message.WhichOneof("body") is None:
        return dead_letters.record_dead_letter(dead_letters.MALFORMED_EVENT, "SessionEvent without a body", record,
                                               message.session_id)
    return Parsed(kind, record, message)


def _unsupported(record: RawRecord, version: int) -> dict:
    return dead_letters.record_dead_letter(
        dead_letters.UNSUPPORTED_SCHEMA,
        f"schema version {version} is newer than {names.EVENT_SCHEMA_VERSION}; upgrade the distiller", record,
        _key(record))


def _key(record: RawRecord) -> str | None:
    try:
        return record.key.decode() if record.key else None
    except UnicodeDecodeError:
        return None


class ParseRecord(beam.DoFn):
    """Main output: (session_id, the record as a plain tuple). Tagged output DEAD: dead-letter rows.

    Valid records cross the shuffle as plain tuples of primitives (fast to encode) and are parsed again
    after grouping: protobuf parsing is far cheaper than pickling messages through GroupByKey.
    """

    def __init__(self, events_topic: str, calls_topic: str):
        self._events_topic = events_topic
        self._calls_topic = calls_topic
        self.malformed = beam.metrics.Metrics.counter("distill", "dead_records")

    def process(self, record: RawRecord):
        parsed = parse_record(record, self._events_topic, self._calls_topic)
        if isinstance(parsed, Parsed):
            yield parsed.message.session_id, tuple(record)
        else:
            self.malformed.inc()
            yield beam.pvalue.TaggedOutput(DEAD, parsed)
