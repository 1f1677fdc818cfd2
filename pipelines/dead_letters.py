"""Dead letters: what the distiller could not use, with a machine-readable reason. Never silently dropped.

Rows follow liverl.contracts.table_schema.DEAD_LETTER_SCHEMA; ids are deterministic so a re-run never duplicates.
Every letter names its tenant (`tenant_id`, None when a record is too broken to tell): a session's identity is
(tenant id, session id), so two tenants' sessions with the same id never share a letter.
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
UNKNOWN_AGENT_ROLE = "unknown_agent_role"  # an agent with no role header that no spawn event names (roles.py)
INVALID_ROW = "invalid_row"  # the trajectory row broke the contract (TrajectoryRow.validate), e.g. a NaN reward
# Partition level: Kafka retention deleted offsets the distiller had not read yet (kafka_source.RetentionGap).
RETENTION_GAP = "retention_gap"

REASONS = (MALFORMED_EVENT, UNSUPPORTED_SCHEMA, UNKNOWN_TOPIC, LATE_EVENT, MISSING_SESSION_START, NO_MODEL_CALLS,
           MISSING_MODEL_CALL, TOKEN_MISMATCH, LABEL_FAILED, UNKNOWN_AGENT_ROLE, INVALID_ROW, RETENTION_GAP)


def utc_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def record_dead_letter(reason: str, message: str, record, tenant_id: str | None, session_id: str | None) -> dict:
    """A dead letter for one Kafka record (payload = its value bytes). batch fields are filled at commit."""
    return {"dead_letter_id": _digest(reason, record.topic, record.partition, record.offset), "reason": reason,
            "message": message, "tenant_id": tenant_id, "session_id": session_id, "source_topic": record.topic,
            "source_partition": record.partition, "source_offset": record.offset, "payload": record.value}


def session_dead_letter(reason: str, message: str, tenant_id: str, session_id: str, summary: dict,
                        agent_id: str = "") -> dict:
    """A dead letter for a whole session, or one agent of it (payload = a JSON summary of what was seen)."""
    return {"dead_letter_id": _digest(reason, "session", tenant_id, session_id, agent_id), "reason": reason,
            "message": message, "tenant_id": tenant_id, "session_id": session_id, "source_topic": None,
            "source_partition": None, "source_offset": None, "payload": json.dumps(summary, sort_keys=True).encode()}


def partition_dead_letter(reason: str, message: str, topic: str, partition: int, offset: int, summary: dict) -> dict:
    """A dead letter for a stretch of a partition, e.g. records retention deleted (payload = a JSON summary)."""
    return {"dead_letter_id": _digest(reason, topic, partition, offset), "reason": reason, "message": message,
            "tenant_id": None, "session_id": None, "source_topic": topic, "source_partition": partition,
            "source_offset": offset, "payload": json.dumps(summary, sort_keys=True).encode()}


def _digest(*parts) -> str:
    """A JSON list, not a joined string: ids with separators in them ("a|b") can never collide."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
