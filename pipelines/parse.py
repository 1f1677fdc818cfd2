"""ParseRecord: RawRecord -> ((tenant_id, session_id), record) or a record-level dead letter.

A session's identity is (tenant id, session id) from the message itself: two tenants may use the same
session id (and the same event ids), and neither may ever reach the other's session.
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
from google.protobuf.message import DecodeError

from liverl.contracts import names
from liverl.privacy.sealing import Forgotten, Opener
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

    @property
    def session_key(self) -> tuple[str, str]:
        return self.message.tenant_id, self.message.session_id


def parse_record(record: RawRecord, events_topic: str, calls_topic: str, opener: Opener | None = None
                 ) -> Parsed | dict | None:
    """The parsed record, or a dead-letter row saying what is wrong with it; None when its subject was erased
    (`liverl forget`: its key is gone, so it can never be read, and it is not a fault to record).
    opener: opens sealed values (liverl.privacy.sealing); None: values are taken as they are."""
    if record.topic == events_topic:
        kind, message_type = EVENT, SessionEvent
    elif record.topic == calls_topic:
        kind, message_type = CALL, ModelCall
    else:
        return dead_letters.record_dead_letter(
            dead_letters.UNKNOWN_TOPIC, f"record from unplanned topic {record.topic}", record, _tenant(record), None)
    header_version = record.header(names.HEADER_SCHEMA_VERSION)
    try:
        if header_version is not None and int(header_version) > names.EVENT_SCHEMA_VERSION:
            return _unsupported(record, int(header_version))
        value = record.value if opener is None else opener.open(record.topic, record.key, record.headers, record.value)
        message = message_type.FromString(value or b"")
    except Forgotten:
        return None
    except (DecodeError, ValueError) as error:
        return dead_letters.record_dead_letter(
            dead_letters.MALFORMED_EVENT, f"not a {message_type.__name__}: {error}", record, _tenant(record),
            _key(record))
    if message.schema_version > names.EVENT_SCHEMA_VERSION:
        return _unsupported(record, message.schema_version)
    missing = [field for field in ("event_id", "session_id", "tenant_id") if not getattr(message, field)]
    if missing:
        return dead_letters.record_dead_letter(
            dead_letters.MALFORMED_EVENT, f"{message_type.__name__} without {', '.join(missing)}", record,
            message.tenant_id or _tenant(record), message.session_id or _key(record))
    if kind == EVENT and message.WhichOneof("body") is None:
        return dead_letters.record_dead_letter(dead_letters.MALFORMED_EVENT, "SessionEvent without a body", record,
                                               message.tenant_id, message.session_id)
    return Parsed(kind, record, message)


def _unsupported(record: RawRecord, version: int) -> dict:
    return dead_letters.record_dead_letter(
        dead_letters.UNSUPPORTED_SCHEMA,
        f"schema version {version} is newer than {names.EVENT_SCHEMA_VERSION}; upgrade the distiller", record,
        _tenant(record), _key(record))


def _key(record: RawRecord) -> str | None:
    """The record key as text: the best guess of the session of a record whose body cannot be read."""
    return _text(record.key)


def _tenant(record: RawRecord) -> str | None:
    """The tenant header of a record whose body cannot be read (None when absent)."""
    return _text(record.header(names.HEADER_TENANT))


def _text(value: bytes | None) -> str | None:
    try:
        return value.decode() if value else None
    except UnicodeDecodeError:
        return None


def opener(keys_dir: str | None) -> Opener | None:
    """The Opener of the key store in keys_dir (made on the worker: keys never travel with the pipeline)."""
    if keys_dir is None:
        return None
    from pathlib import Path

    from liverl.privacy.keystore import FileKeyStore

    return Opener(FileKeyStore(Path(keys_dir)))


class ParseRecord(beam.DoFn):
    """Main output: ((tenant_id, session_id), the record as a plain tuple). Tagged output DEAD: dead-letter rows.

    Valid records cross the shuffle as plain tuples of primitives (fast to encode) and are parsed again
    after grouping: protobuf parsing is far cheaper than pickling messages through GroupByKey.
    """

    def __init__(self, events_topic: str, calls_topic: str, keys_dir: str | None = None):
        self._events_topic = events_topic
        self._calls_topic = calls_topic
        self._keys_dir = keys_dir
        self._opener = None
        self.malformed = beam.metrics.Metrics.counter("distill", "dead_records")
        self.erased = beam.metrics.Metrics.counter("distill", "erased_records")

    def process(self, record: RawRecord):
        if self._opener is None:
            self._opener = opener(self._keys_dir)
        parsed = parse_record(record, self._events_topic, self._calls_topic, self._opener)
        if parsed is None:
            self.erased.inc()
        elif isinstance(parsed, Parsed):
            yield parsed.session_key, tuple(record)
        else:
            self.malformed.inc()
            yield beam.pvalue.TaggedOutput(DEAD, parsed)
