"""Hostile input against the RUNNING capture service (gRPC and HTTP, loopback): no 5xx, no death, every
invalid event refused with a reason and counted, every valid one delivered to Kafka exactly once."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import grpc
import httpx
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.sdk.sender import _frame
from liverl.v1 import capture_pb2, session_event_pb2
from tests.conftest import stored_key
from tests.ingest.conftest import events_of, read_topic

AUTH = (("authorization", "Bearer acme-token"),)
HOSTILE = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)

# Inputs that took the old regexes seconds (quadratic or worse); they are valid events and must pass fast.
CRAFTED = ["a" * 40_000, "a@" * 20_000, "a." * 20_000 + "@", "+1 " * 13_000, "1-" * 20_000,
           "bearer " * 5_000, "API_KEY" * 5_000 + "=", "-----BEGIN PRIVATE KEY-----" + "x" * 40_000,
           "eyJ" + "a" * 40_000 + ".", "x" * 70_000]  # past the field cap: cut, not refused
PII = ["mail bob@example.com", "card 4111 1111 1111 1111", "iban GB82 WEST 1234 5698 7654 32",
       "call 4155550134", "ssn 536-22-1234", "DB_PASSWORD=hunter2"]
INVALID = ["schema", "tenant", "skew", "too_large", "no_body", "unknown_session", "bad_value", "bad_utf8",
           "garbage"]
hostile_text = st.text(max_size=300) | st.sampled_from(CRAFTED) | st.sampled_from(PII)
item = st.tuples(st.sampled_from(["valid"] * 3 + INVALID), hostile_text, st.dictionaries(st.text(max_size=20),
                                                                                           hostile_text, max_size=2))


def valid_event(text: str, attributes: dict) -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex, schema_version=1,
                                           event_time_ms=int(time.time() * 1000))
    event.session_start.task_family = text
    event.session_start.attributes.update(attributes)
    return event


def invalid_event(kind: str, text: str, attributes: dict, api: str):
    """(what to send, bytes for gRPC or a JSON value for HTTP) for one invalid event of `kind`."""
    event = valid_event(text, attributes)
    if kind == "schema":
        event.schema_version = 0
    elif kind == "tenant":
        event.tenant_id = "globex"  # another tenant than the token's: refused and counted
    elif kind == "skew":
        event.event_time_ms += 3_600_000
    elif kind == "too_large":
        event.session_start.task_family = "x" * 300_000
    elif kind == "no_body":
        event.ClearField("session_start")
    elif kind == "unknown_session":
        event.user_message.text = text
    elif kind == "bad_value":
        event.outcome.score = 2.0
    elif kind == "bad_utf8":
        if api == "grpc":
            return event.SerializeToString().replace(event.session_id.encode(), b"\xff" * 32)
        payload = json_format.MessageToDict(event)
        payload["sessionId"] = "\ud800"
        return payload
    elif kind == "garbage":
        return b"\x08" + text.encode()[:50] + b"\x80" if api == "grpc" else [text, 1]
    return event.SerializeToString() if api == "grpc" else json_format.MessageToDict(event)


def test_hostile_batches_over_both_apis_store_each_valid_event_exactly_once(capture):
    grpc_call = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    http = httpx.Client(headers={"authorization": "Bearer acme-token"}, timeout=60)
    url = f"http://{capture.http_address}/v1/capture"
    sent_valid: set[str] = set()
    tally = Counter()

    @HOSTILE
    @given(items=st.lists(item, min_size=1, max_size=6), api=st.sampled_from(["grpc", "http"]))
    def run(items, api):
        payloads, valid_at = [], set()
        for index, (kind, text, attributes) in enumerate(items):
            if kind == "valid":
                event = valid_event(text, attributes)
                sent_valid.add(event.event_id)
                valid_at.add(index)
                payloads.append(event.SerializeToString() if api == "grpc" else json_format.MessageToDict(event))
            else:
                payloads.append(invalid_event(kind, text, attributes, api))
        tally["cases"] += 1
        if api == "grpc":
            response = grpc_call(b"".join(_frame(p) for p in payloads), metadata=AUTH, timeout=60)
            accepted, rejected = response.accepted, [(r.index, r.reason, r.message) for r in response.rejected]
        else:
            answer = http.post(url, content=json.dumps({"events": payloads}).encode())
            assert answer.status_code == 200, answer.text
            body = answer.json()
            accepted, rejected = body["accepted"], [(r["index"], r["reason"], r["message"]) for r in body["rejected"]]
        assert accepted == len(valid_at)
        assert {index for index, _, _ in rejected} == set(range(len(items))) - valid_at
        assert all(reason and message for _, reason, message in rejected)
        tally["rejected"] += len(rejected)
        tally.update(reason for _, reason, _ in rejected)

    try:
        run()
    finally:
        http.close()
    config = capture.config
    records = read_topic(config, config.kafka.session_events_topic, want=len(sent_valid), timeout_s=60)
    stored = Counter((e.tenant_id, e.event_id) for e in events_of(records))
    delivered = {event_id for (tenant, event_id) in stored if tenant == "acme"}
    lost = sent_valid - delivered
    print(f"\nhostile suite: cases={tally['cases']} valid={len(sent_valid)} rejected={tally['rejected']} "
          f"delivered={len(delivered)} lost={len(lost)} duplicates={sum(n - 1 for n in stored.values())} "
          f"reasons={dict((k, v) for k, v in tally.items() if k not in ('cases', 'rejected'))}")
    assert not lost and delivered == sent_valid and set(stored.values()) <= {1}
    assert all(pii not in r.value for r in records for pii in (b"bob@example.com", b"4111 1111", b"hunter2"))
    registry = capture.metrics.registry
    counted = sum(registry.get_sample_value("liverl_ingest_events_rejected_total", {"reason": reason}) or 0
                  for reason in set(tally) - {"cases", "rejected"})
    assert counted == tally["rejected"]
    assert (registry.get_sample_value("liverl_ingest_cross_tenant_attempts_total", {"tenant": "acme"}) or 0) == \
        tally["tenant_mismatch"]
    assert httpx.get(f"http://{capture.http_address}/healthz").status_code == 200


def start_event(session_id: str, event_id: str, kind: str = "session_start") -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id=event_id, session_id=session_id, schema_version=1,
                                           event_time_ms=int(time.time() * 1000), sequence=0)
    getattr(event, kind).SetInParent()
    return event


def test_two_tenants_with_the_same_session_and_event_ids_never_touch_each_other(capture):
    
    stub = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=capture_pb2.CaptureRequest.SerializeToString,
        response_deserializer=capture_pb2.CaptureResponse.FromString)

    def send(token: str, *events):
        return stub(capture_pb2.CaptureRequest(events=events), metadata=(("authorization", f"Bearer {token}"),))

    assert send("acme-token", start_event("shared", "e1")).accepted == 1
    assert send("globex-token", start_event("shared", "e1")).accepted == 1  # same ids, other tenant: stored
    globex_end = start_event("shared", "e2", "session_end")
    assert send("globex-token", globex_end).accepted == 1  # closes globex's "shared" only
    acme_message = start_event("shared", "e2", "user_message")
    acme_message.sequence = 1
    answer = send("acme-token", acme_message, start_event("shared", "e1"))  # e1 again: acknowledged, not stored
    assert answer.accepted == 2 and not answer.rejected
    config = capture.config
    records = read_topic(config, config.kafka.session_events_topic, want=4)
    assert sorted((r.key, events_of([r])[0].event_id) for r in records) == sorted([
        (stored_key(config, "acme", "shared"), "e1"), (stored_key(config, "acme", "shared"), "e2"),
        (stored_key(config, "globex", "shared"), "e1"), (stored_key(config, "globex", "shared"), "e2")])
    registry = capture.metrics.registry
    assert registry.get_sample_value("liverl_ingest_events_duplicate_total", {"tenant": "acme"}) == 1


def test_a_payload_or_header_naming_another_tenant_is_refused_and_counted(capture):
    stub = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=capture_pb2.CaptureRequest.SerializeToString,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    foreign = start_event("s1", "x1")
    foreign.tenant_id = "globex"
    answer = stub(capture_pb2.CaptureRequest(events=[foreign]), metadata=AUTH)
    assert answer.accepted == 0 and [r.reason for r in answer.rejected] == ["tenant_mismatch"]
    try:
        stub(capture_pb2.CaptureRequest(events=[start_event("s2", "x2")]),
             metadata=AUTH + (("x-liverl-tenant", "globex"),))
        raise AssertionError("a header naming another tenant was accepted")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    url = f"http://{capture.http_address}/v1/capture"
    body = {"events": [json_format.MessageToDict(foreign)]}
    assert httpx.post(url, json=body, headers={"authorization": "Bearer acme-token"}).json()["rejected"][0][
        "reason"] == "tenant_mismatch"
    assert httpx.post(url, json=body, headers={"authorization": "Bearer acme-token",
                                               "x-liverl-tenant": "globex"}).status_code == 403
    registry = capture.metrics.registry
    assert registry.get_sample_value("liverl_ingest_cross_tenant_attempts_total", {"tenant": "acme"}) == 4
    assert not read_topic(capture.config, capture.config.kafka.session_events_topic, want=1, timeout_s=3)


def test_credentials_are_checked_before_anything_is_read(capture):
    url = f"http://{capture.http_address}/v1/capture"
    for headers in [{}, {"authorization": "Bearer nope"}, {"authorization": "acme-token"},
                    {"authorization": "Basic acme-token"}, {"authorization": "Bearer x"},
                    {"authorization": "Bearer acme-token" + "x" * 5000}]:
        answer = httpx.post(url, headers=headers, json={"events": [{}]})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer", headers
    channel = grpc.insecure_channel(capture.grpc_address)
    call = channel.unary_unary("/liverl.v1.CaptureService/Capture", request_serializer=None,
                               response_deserializer=capture_pb2.CaptureResponse.FromString)
    for metadata in [(), (("authorization", "Bearer globex"),), (("authorization", "Token acme-token"),)]:
        try:
            call(b"", metadata=metadata)
            raise AssertionError(f"{metadata} was let in")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert capture.metrics.registry.get_sample_value("liverl_ingest_requests_rejected_total",
                                                     {"reason": "unauthenticated"}) == 9
