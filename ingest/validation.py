"""Parse and check one SessionEvent: every way it can be wrong has a reason name and a message that
says what to do. The capture service turns a `Rejected` into a rejection for the caller and a dead letter.

One set of rules for every way in: capture (gRPC and HTTP) and OTLP call `validate`; `liverl import`, whose
events keep their historic times, calls `check_content` (everything but the clock and the stamping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, unknown_fields
from google.protobuf.message import DecodeError, Message

from liverl.contracts import names
from liverl.v1 import common_pb2, session_event_pb2

SessionEvent = session_event_pb2.SessionEvent
MAX_ID_CHARS = 256
LATE_KINDS = frozenset({"feedback", "outcome"})  # may arrive after the session closed
AGENT_ROLES = frozenset(common_pb2.AgentRole.values())
FEEDBACK_KINDS = frozenset(session_event_pb2.FeedbackKind.values()) - {session_event_pb2.FEEDBACK_KIND_UNSPECIFIED}
# Ids beside event_id and session_id (join keys, log fields): printable (no control characters, which
# break logs and terminals and can forge lines), at most MAX_ID_CHARS; empty is allowed (optional).
# Free text (task_family, names, messages) is redacted and size-limited, not held to a character set.
ID_FIELDS = {None: ("user_id", "agent_id"), "session_start": ("task_id",),
             "tool_call": ("call_id", "request_id"), "tool_result": ("call_id",),
             "feedback": ("target_call_id",), "summary": ("request_id",),
             "subagent_created": ("subagent_id",), "task_assigned": ("subagent_id", "task_id"),
             "subagent_finished": ("subagent_id", "task_id")}
FEEDBACK_VALUE_RANGE = (-1.0, 1.0)  # thumbs and edits carry +-1 (or nothing); a rating lies in [0, 1]
MAX_TOKEN_BUDGET = 100_000_000  # a context budget in tokens; more is a bug or an attack, not a model


class Rejected(ValueError):
    """An event the service refuses: `reason` is machine-readable, the message is for a human."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Limits:
    max_event_bytes: int
    max_future_skew_ms: int
    max_event_age_ms: int


def parse_binary(raw: bytes) -> SessionEvent:
    """A SessionEvent from protobuf bytes, telling invalid UTF-8 apart from broken encoding."""
    try:
        return SessionEvent.FromString(raw)
    except DecodeError:
        pass
    try:
        _lenient_event_class().FromString(raw)
    except DecodeError:
        raise Rejected("invalid_protobuf", "the event is not a valid serialized liverl.v1.SessionEvent; "
                                           "serialize it with the generated class (SerializeToString)") from None
    raise Rejected("invalid_utf8", "a string field of the event is not valid UTF-8; send text as UTF-8 "
                                   "(binary data belongs base64-encoded in a string)")


def parse_json(item: object) -> SessionEvent:
    """A SessionEvent from its JSON form (protobuf JSON mapping: camelCase or field names)."""
    if not isinstance(item, dict):
        raise Rejected("wrong_type", f"each event must be a JSON object, got {type(item).__name__}")
    try:
        return json_format.ParseDict(item, SessionEvent())
    except json_format.ParseError as error:
        text = str(error).split("\n")[0].rstrip(".")
        reason = "invalid_utf8" if "surrogate" in text.lower() else "wrong_type" if "field" in text else "invalid_schema"
        if "no field named" in text:
            reason = "invalid_schema"
        raise Rejected(reason, f"{text}; see proto/liverl/v1/session_event.proto for the fields and types")
    except (ValueError, TypeError, RecursionError) as error:
        raise Rejected("wrong_type", f"the event does not match SessionEvent: {error}") from None


def validate(event: SessionEvent, tenant_id: str, now_ms: int, limits: Limits) -> None:
    """Check an event in place and stamp what the service owns (tenant, ingest time, default agent id)."""
    check_content(event)
    if event.tenant_id and event.tenant_id != tenant_id:
        raise Rejected("tenant_mismatch", "the event names another tenant than the caller's token; leave tenant_id "
                                          "empty (the service sets it) or use that tenant's token")
    _check_time(event, now_ms, limits)
    if event.agent_id == "":
        event.agent_id = "main"
    event.tenant_id = tenant_id
    event.ingest_time_ms = now_ms
    size = event.ByteSize()
    if size > limits.max_event_bytes:
        raise Rejected("too_large", f"the event is {size} bytes, over the {limits.max_event_bytes}-byte limit; "
                                    "send large outputs truncated or by reference")


def check_content(event: SessionEvent) -> None:
    """Every rule on what the event says (ids, schema, body, values, no unknown fields), not on when."""
    _check_ids(event)
    if _has_unknown_fields(event):
        raise Rejected("unknown_field", "the event has fields this service does not know (field numbers outside "
                                        "proto/liverl/v1/session_event.proto); build it with the generated classes "
                                        "of this schema version")
    if event.schema_version != names.EVENT_SCHEMA_VERSION:
        if event.schema_version == 0:
            raise Rejected("invalid_schema", f"schema_version is missing; set it to {names.EVENT_SCHEMA_VERSION}")
        raise Rejected("unsupported_schema_version", f"schema_version {event.schema_version} is not supported; "
                                                     f"this service speaks {names.EVENT_SCHEMA_VERSION}")
    if event.WhichOneof("body") is None:
        raise Rejected("invalid_schema", "the event has no body; set exactly one of session_start, user_message, ...")
    _check_id_fields(event)
    _check_values(event)


def _check_ids(event: SessionEvent) -> None:
    for field in ("event_id", "session_id"):
        value = getattr(event, field)
        if not value:
            raise Rejected("invalid_schema", f"{field} is required (the SDK sets it; HTTP callers must too)")
        if len(value) > MAX_ID_CHARS or not value.isprintable():
            raise Rejected("invalid_schema", f"{field} must be printable and at most {MAX_ID_CHARS} characters")


def _check_id_fields(event: SessionEvent) -> None:
    kind = event.WhichOneof("body")
    for owner, fields in ((None, ID_FIELDS[None]), (kind, ID_FIELDS.get(kind, ()))):
        message = event if owner is None else getattr(event, owner)
        for field in fields:
            value = getattr(message, field)
            if len(value) > MAX_ID_CHARS or not value.isprintable():
                where = field if owner is None else f"{owner}.{field}"
                raise Rejected("invalid_value", f"{where} must be printable (no control characters) and at most "
                                                f"{MAX_ID_CHARS} characters")


def _has_unknown_fields(message: Message) -> bool:
    """Whether the message or any message inside it holds fields of numbers its schema does not define."""
    if len(unknown_fields.UnknownFieldSet(message)):
        return True
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            continue  # map entries are rebuilt on parse: their unknown fields are dropped already
        if any(_has_unknown_fields(item) for item in (value if field.is_repeated else (value,))):
            return True
    return False


def _check_time(event: SessionEvent, now_ms: int, limits: Limits) -> None:
    if event.event_time_ms <= 0:
        raise Rejected("invalid_schema", "event_time_ms is required: unix milliseconds when it happened")
    if event.event_time_ms > now_ms + limits.max_future_skew_ms:
        ahead = (event.event_time_ms - now_ms) / 1000
        raise Rejected("clock_skew", f"event_time_ms is {ahead:.0f} s in the future (limit "
                                     f"{limits.max_future_skew_ms / 1000:.0f} s); check the producer's clock (NTP)")
    if event.event_time_ms < now_ms - limits.max_event_age_ms:
        age = (now_ms - event.event_time_ms) / 1000
        raise Rejected("too_old", f"event_time_ms is {age:.0f} s old (limit {limits.max_event_age_ms / 1000:.0f} s); "
                                  "check the producer's clock, or the event was held too long")


def _check_values(event: SessionEvent) -> None:
    kind = event.WhichOneof("body")
    if kind == "feedback":
        if event.feedback.kind not in FEEDBACK_KINDS:
            raise Rejected("invalid_value", f"feedback.kind {event.feedback.kind} is not a known FeedbackKind; set one "
                                            "of THUMBS_UP, THUMBS_DOWN, EDIT_KEPT, EDIT_REVERTED, "
                                            "DISSATISFIED_FOLLOWUP, RATING")
        value = event.feedback.value
        low, high = FEEDBACK_VALUE_RANGE
        if not (math.isfinite(value) and low <= value <= high):
            raise Rejected("invalid_value", f"feedback.value must be a finite number in [{low:g}, {high:g}]")
        if event.feedback.kind == session_event_pb2.FEEDBACK_KIND_RATING and not 0.0 <= value <= 1.0:
            raise Rejected("invalid_value", "a RATING feedback's value must lie in [0, 1]")
    elif kind == "outcome":
        score = event.outcome.score
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise Rejected("invalid_value", "outcome.score must be a finite number in [0, 1]")
        if any(not math.isfinite(v) for v in event.outcome.metrics.values()):
            raise Rejected("invalid_value", "outcome.metrics values must be finite numbers")
        if any(len(name) > MAX_ID_CHARS or not name.isprintable() for name in event.outcome.metrics):
            raise Rejected("invalid_value", f"outcome.metrics names must be printable, at most {MAX_ID_CHARS} "
                                            "characters")
    elif kind == "session_start":
        if not 0 <= event.session_start.token_budget <= MAX_TOKEN_BUDGET:
            raise Rejected("invalid_value", f"session_start.token_budget must lie in [0, {MAX_TOKEN_BUDGET}] "
                                            "(0: no budget)")
    elif kind == "task_assigned" and event.task_assigned.stage < 0:
        raise Rejected("invalid_value", "task_assigned.stage must be 0 or more (the orchestrator step)")
    elif kind == "subagent_finished" and event.subagent_finished.steps < 0:
        raise Rejected("invalid_value", "subagent_finished.steps must be 0 or more (model calls taken)")
    if event.agent_role not in AGENT_ROLES:
        raise Rejected("invalid_value", f"agent_role {event.agent_role} is not a known AgentRole")


@cache
def _lenient_event_class():
    """SessionEvent compiled as proto2, which does not check UTF-8: parses iff only UTF-8 was wrong."""
    pool = descriptor_pool.DescriptorPool()
    for module in (common_pb2, session_event_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        proto.syntax = "proto2"
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("liverl.v1.SessionEvent"))
