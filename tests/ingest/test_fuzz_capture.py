"""Fuzzed payloads (hypothesis) through the real service: no crash, every bad event rejected cleanly,
the good event sent alongside always accepted."""

from __future__ import annotations

import json
import time
import uuid

import grpc
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.sdk.sender import _frame
from liverl.v1 import capture_pb2, session_event_pb2

AUTH = (("authorization", "Bearer acme-token"),)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                      max_size=3), max_leaves=8)
field_names = st.sampled_from(["eventId", "sessionId", "schemaVersion", "eventTimeMs", "sequence", "agentRole",
                               "userMessage", "toolCall", "feedback", "outcome", "sessionStart", "tenantId"])
json_events = st.dictionaries(field_names | st.text(max_size=8), json_values, max_size=6)


def good_event() -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex, schema_version=1,
                                           event_time_ms=int(time.time() * 1000))
    event.session_start.task_family = "fuzz"
    return event


def fuzz_bytes():
    valid = good_event().SerializeToString()
    mutated = st.builds(lambda i, b: valid[:i] + bytes([b]) + valid[i + 1:],
                        st.integers(0, len(valid) - 1), st.integers(0, 255))
    return st.binary(max_size=300) | mutated


def test_fuzzed_grpc_events_never_crash_the_service(capture):
    call = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)

    @FUZZ
    @given(payloads=st.lists(fuzz_bytes(), min_size=1, max_size=4))
    def run(payloads):
        good = good_event()
        request = b"".join(_frame(p) for p in payloads) + _frame(good.SerializeToString())
        response = call(request, metadata=AUTH, timeout=30)
        assert response.accepted + len(response.rejected) + response.dropped_opt_out == len(payloads) + 1
        assert len(payloads) not in {r.index for r in response.rejected}, "the good event was rejected"
        assert all(r.reason and r.message for r in response.rejected)

    run()


def test_fuzzed_json_events_never_crash_the_service(capture):
    url = f"http://{capture.http_address}/v1/capture"
    with httpx.Client(headers={"authorization": "Bearer acme-token"}, timeout=30) as http:

        @FUZZ
        @given(items=st.lists(json_events | json_values, min_size=1, max_size=4))
        def run(items):
            from google.protobuf import json_format

            good = json_format.MessageToDict(good_event())
            # json.dumps writes NaN/Infinity, which strict JSON lacks: the service must cope with those too
            response = http.post(url, content=json.dumps({"events": [*items, good]}).encode())
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["accepted"] + len(body["rejected"]) + body["droppedOptOut"] == len(items) + 1
            assert len(items) not in {r["index"] for r in body["rejected"]}
            assert all(r["reason"] and r["message"] for r in body["rejected"])

        run()
    assert httpx.get(f"http://{capture.http_address}/healthz").status_code == 200
