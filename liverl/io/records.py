"""The Kafka records liverl writes, of every kind, built in one place (docs/architecture.md, contract 1).

Every record that belongs to a session is keyed (tenant, session) (liverl/contracts/keys.py) and carries three
headers: the schema version, the tenant and its kind. A dead letter (input refused with its reason) is a JSON
envelope that says who refused it (`source`: "ingest" or "serving"), why, for which tenant and session, when, and
what was refused (`payload_b64`: already redacted or summarised by the caller, never raw user data).
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache

from liverl.contracts import names
from liverl.contracts.keys import session_key
from liverl.io.kafka_writer import Record

SESSION_EVENT = b"session-event"  # the kinds named by names.HEADER_KIND
MODEL_CALL = b"model-call"
DEAD_LETTER = b"dead-letter"

_SCHEMA_VERSION = str(names.EVENT_SCHEMA_VERSION).encode()
KIND_HEADER = names.HEADER_KIND  # what readers look up to tell the kinds above apart


@lru_cache(maxsize=4096)  # built once per tenant and kind, not once per record
def headers(tenant_id: str, kind: bytes) -> tuple[tuple[str, bytes], ...]:
    """The headers of every liverl record: schema version, tenant, kind."""
    return ((names.HEADER_SCHEMA_VERSION, _SCHEMA_VERSION), (names.HEADER_TENANT, tenant_id.encode("utf-8")),
            (names.HEADER_KIND, kind))


def session_record(topic: str, kind: bytes, tenant_id: str, session_id: str, value: bytes,
                   event_time_ms: int = 0) -> Record:
    """A session's record (a SessionEvent or ModelCall, serialized) on its topic; event_time_ms: when what it
    reports happened (the delivery latency's start; 0 when unknown)."""
    return Record(topic, session_key(tenant_id, session_id), value, headers(tenant_id, kind), event_time_ms)


def dead_letter(topic: str, *, source: str, reason: str, message: str, tenant_id: str, session_id: str,
                payload: bytes, at_ms: int, event_time_ms: int = 0) -> Record:
    """A dead letter: the envelope as JSON, keyed by the session it belongs to ("" when none is known)."""
    value = json.dumps({"reason": reason, "message": message, "source": source, "tenant_id": tenant_id,
                        "session_id": session_id, "payload_b64": base64.b64encode(payload).decode("ascii"),
                        "at_ms": at_ms}).encode()
    return session_record(topic, DEAD_LETTER, tenant_id, session_id, value, event_time_ms)
