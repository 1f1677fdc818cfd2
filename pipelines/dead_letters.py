"""Dead letters: what the distiller could not use, with a machine-readable reason. Never silently dropped.

Rows follow liverl.table_schema.DEAD_LETTER_SCHEMA; ids are deterministic so a re-run never duplicates.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

# Record level: the bytes on the topic are unusable.
MALFORMED_EVENT = "malformed_event"  # not a protobuf of the topic's type, or no event/session id
UNSUPPORTED_SCHEMA = "unsupported_schema_version"  # newer than names.EVENT_SCHEMA_VERSION
UNKNOWN_TOPIC = "unknown_topic"
# Event level: the event arrived after its session was emitted (or dead-lettered); kept here, not merged.
LATE_EVENT = "late_event"
# Session level: the session cannot be rebuilt into trajectories.
MISSING_SESSION_START = "missing_session_start"  # events or calls of a session never started
NO_MODEL_CALLS = "no_model_calls"  # a session with nothing the policy generated
MISSING_MODEL_CALL = "missing_model_call"  # a tool call or summary names a request with no ModelCall
TOKEN_MISMATCH = "token_mismatch"  # behaviour logprobs do not align with the completion tokens
LABEL_FAILED = "label_failed"  # the reward library raised on this session

REASONS = (MALFORMED_EVENT, UNSUPPORTED_SCHEMA, UNKNOWN_TOPIC, LATE_EVENT, MISSING_SESSION_START, NO_MODEL_CALLS,
           MISSING_MODEL_CALL, TOKEN_MISMATCH, LABEL_FAILED)


def utc_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def record_dead_letter(reason: str, message: str, record, session_id: str | None) -> dict:
    """A dead letter for one Kafka record (payload = its value bytes). batch fields are filled at commit."""
    identity = f"{reason}|{record.topic}|{record.partition}|{record.offset}"
    return {"dead_letter_id": _digest(identity), "reason": reason, "message": message, "session_id": session_id,
            "source_topic": record.topic, "source_partition": record.partition, "source_offset": record.offset,
            "payload": record.value}


def session_dead_letter(reason: str, message: str, session_id: str, summary: dict, agent_id: str = "") -> dict:
    """A dead letter for a whole session, or one agent of it (payload = a JSON summary of what was seen)."""
    return {"dead_letter_id": _digest(f"{reason}|session|{session_id}|{agent_id}"), "reason": reason, "message": message,
            "session_id": session_id, "source_topic": None, "source_partition": None, "source_offset": None,
            "payload": json.dumps(summary, sort_keys=True).encode()}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
