"""Events whose fields lie outside their real range or character set, sent to the RUNNING capture service
over gRPC and HTTP: each refused by the one validation (ingest/validation.py) with its reason, counted, and
dead-lettered; the valid event of the same batch is stored."""

from __future__ import annotations

import base64
import json
import time
import uuid

import grpc
import httpx
from google.protobuf import json_format

from ingest.sdk.sender import _frame
from liverl.v1 import capture_pb2, session_event_pb2
from tests.ingest.conftest import read_topic

UNKNOWN_FIELD = b"\xf8\x07\x01"  # field 127 (varint): no field of SessionEvent


def _start(**fields) -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex, schema_version=1,
                                           event_time_ms=int(time.time() * 1000))
    event.session_start.task_family = "coding"
    for name, value in fields.items():
        if name == "token_budget":
            event.session_start.token_budget = value
        else:
            setattr(event, name, value)
    return event


def _with_body(body_kind: str, **body) -> session_event_pb2.SessionEvent:
    event = _start()
    event.ClearField("session_start")
    message = {"feedback": "Feedback", "task_assigned": "TaskAssigned", "subagent_finished": "SubAgentFinished"}
    getattr(event, body_kind).CopyFrom(getattr(session_event_pb2, message[body_kind])(**body))
    return event


def hostile_events() -> list[session_event_pb2.SessionEvent]:
    return [_start(agent_id="main\x1b[31m"), _start(user_id="u\r\nforged: line"), _start(token_budget=-5),
            _with_body("task_assigned", subagent_id="s1", stage=-1),
            _with_body("subagent_finished", subagent_id="s1", steps=-2),
            _with_body("feedback", value=1.0),  # FEEDBACK_KIND_UNSPECIFIED
            _with_body("feedback", kind=session_event_pb2.FEEDBACK_KIND_THUMBS_UP, value=1e308)]


def test_out_of_range_fields_are_refused_over_grpc_and_http_and_dead_lettered(capture):
    call = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    hostile = hostile_events()
    good = _start()
    unknown = _start().SerializeToString() + UNKNOWN_FIELD
    request = b"".join(_frame(e.SerializeToString()) for e in hostile) + _frame(unknown) + _frame(
        good.SerializeToString())
    answer = call(request, metadata=(("authorization", "Bearer acme-token"),), timeout=30)
    reasons = {r.index: r.reason for r in answer.rejected}
    assert answer.accepted == 1 and set(reasons) == set(range(len(hostile) + 1)), reasons
    assert set(reasons.values()) == {"invalid_value", "unknown_field"} and reasons[len(hostile)] == "unknown_field"

    http_good = _start()
    body = {"events": [json_format.MessageToDict(e) for e in hostile_events()] + [json_format.MessageToDict(http_good)]}
    reply = httpx.post(f"http://{capture.http_address}/v1/capture", json=body,
                       headers={"authorization": "Bearer acme-token"}, timeout=30).json()
    assert reply["accepted"] == 1 and {r["reason"] for r in reply["rejected"]} == {"invalid_value"}
    assert len(reply["rejected"]) == len(hostile) and all(r["message"] for r in reply["rejected"])

    refused = 2 * len(hostile) + 1
    config = capture.config
    letters = [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want=refused)]
    assert sorted(d["reason"] for d in letters) == sorted(["invalid_value"] * 2 * len(hostile) + ["unknown_field"])
    registry = capture.metrics.registry
    assert registry.get_sample_value("liverl_ingest_events_rejected_total", {"reason": "invalid_value"}) == \
        2 * len(hostile)
    stored = {e.event_id for e in (session_event_pb2.SessionEvent.FromString(r.value) for r in
                                   read_topic(config, config.kafka.session_events_topic, want=2))}
    assert stored == {good.event_id, http_good.event_id}


def test_a_compressed_capture_body_is_refused_and_dead_lettered_as_a_summary(capture):
    import gzip

    event = json_format.MessageToDict(_start(user_id="dave@example.com"))
    body = gzip.compress(json.dumps({"events": [event]}).encode())
    answer = httpx.post(f"http://{capture.http_address}/v1/capture", content=body, timeout=30,
                        headers={"authorization": "Bearer acme-token", "content-encoding": "gzip",
                                 "content-type": "application/json"})
    assert answer.status_code == 415 and answer.json()["error"] == "unsupported_encoding"
    config = capture.config
    (letter,) = [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want=1)]
    summary = json.loads(base64.b64decode(letter["payload_b64"]))
    assert summary["content_encoding"] == "gzip" and summary["body_bytes"] == len(body)
    assert "dave" not in json.dumps(letter)
