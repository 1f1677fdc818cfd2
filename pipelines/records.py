"""RawRecord: one Kafka record exactly as read, the unit that flows from the reader into the pipeline.

Produced by ReadOffsetRange (and by the pending-state file, for sessions carried over from an earlier
batch); consumed by ParseRecord. Kept raw so a pending session can be re-parsed in a later batch and a
malformed record can go to the dead-letter table byte for byte.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa


class RawRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def to_row(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp_ms": self.timestamp_ms, "key": self.key, "value": self.value,
                "headers": [{"key": k, "value": v} for k, v in self.headers]}

    @classmethod
    def from_row(cls, row: dict) -> "RawRecord":
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        return cls(row["topic"], row["partition"], row["offset"], row["timestamp_ms"], row["key"], row["value"],
                   headers)


# The pending-state file: the raw records of sessions that were not ready when their batch committed.
RAW_RECORD_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp_ms", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
])

# The closed-session file: sessions already emitted (or dead-lettered), so later events count as late.
# Keyed by (tenant_id, session_id); files written before tenant_id existed read it as null.
CLOSED_SESSION_SCHEMA = pa.schema([
    pa.field("tenant_id", pa.string()),
    pa.field("session_id", pa.string()),
    pa.field("closed_at_ms", pa.int64()),
])
