"""The capture service over gRPC, end to end on the real broker: SDK -> service -> Kafka."""

from __future__ import annotations

import base64
import json
import time

import grpc
import pytest

from ingest.sdk import CaptureClient, FeedbackKind
from liverl.contracts import names
from liverl.v1 import capture_pb2, capture_pb2_grpc, session_event_pb2
from tests.conftest import stored_key
from tests.ingest.conftest import assert_sessions_complete, capture_config, events_of, read_topic


def stub(server):
    return capture_pb2_grpc.CaptureServiceStub(grpc.insecure_channel(server.grpc_address))


def raw_event(session_id="s1", event_id="e1", **fields) -> session_event_pb2.SessionEvent:
    fields.setdefault("event_time_ms", int(time.time() * 1000))
    event = session_event_pb2.SessionEvent(event_id=event_id, session_id=session_id, schema_version=1, **fields)
    if event.WhichOneof("body") is None:
        event.session_start.task_family = "coding"
    return event


def test_sdk_sessions_land_in_kafka_keyed_ordered_tagged_and_redacted(capture, tmp_path):
    config = capture.config
    client = CaptureClient(capture.grpc_address, "acme-token", tmp_path / "sdk")
    sessions = [client.start_session(task_family="coding", task_id=f"t{i}", user_id=f"u{i}") for i in range(3)]
    for i, s in enumerate(sessions):
        s.user_message(f"fix it, I am at user{i}@example.com")
        call = s.tool_call("edit", '{"file": "a.py"}', request_id="req-1")
        s.tool_result(call, "ok")
        s.for_agent("sub-1").tool_call("search", "{}")
        s.outcome(success=True, score=1.0)
        s.end("completed")
        client.feedback(s.session_id, FeedbackKind.EDIT_KEPT, value=1.0, target_call_id=call)
    assert client.flush(timeout_s=30)
    stats = client.stats()
    client.close()
    assert stats["sent"] == stats["recorded"] == 24 and stats["dropped"] == stats["rejected"] == 0

    records = read_topic(config, config.kafka.session_events_topic, want=24)
    events = events_of(records)
    for s in sessions:
        assert len({r.partition for r in records if r.key == stored_key(config, "acme", s.session_id)}) == 1
    assert_sessions_complete(events, {s.session_id: 8 for s in sessions})
    assert all(e.tenant_id == "acme" and e.ingest_time_ms > 0 for e in events)
    assert {dict(r.headers)[names.HEADER_TENANT] for r in records} == {b"acme"}
    assert {dict(r.headers)[names.HEADER_KIND] for r in records} == {b"session-event"}
    texts = [e.user_message.text for e in events if e.WhichOneof("body") == "user_message"]
    assert texts and all("example.com" not in t and "[REDACTED:email]" in t for t in texts)
    sub = [e for e in events if e.agent_id == "sub-1"]
    assert len(sub) == 3 and all(e.agent_role == 3 for e in sub)
    metrics = capture.metrics.registry
    assert metrics.get_sample_value("liverl_ingest_redactions_total", {"kind": "email"}) == 3
    assert metrics.get_sample_value("liverl_ingest_events_accepted_total", {"tenant": "acme"}) == 24
    assert metrics.get_sample_value("liverl_ingest_end_to_end_seconds_count") == 24


def test_missing_and_wrong_tokens_are_unauthenticated(capture):
    request = capture_pb2.CaptureRequest(events=[raw_event()])
    for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", "Basic acme-token"),)]:
        with pytest.raises(grpc.RpcError) as caught:
            stub(capture).Capture(request, metadata=metadata)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as caught:
        stub(capture).Capture(request, metadata=(("authorization", "Bearer acme-token"),
                                                 (names.META_TENANT, "globex")))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert capture.metrics.registry.get_sample_value("liverl_ingest_requests_rejected_total",
                                                     {"reason": "unauthenticated"}) == 3


def test_an_event_can_never_be_written_under_another_tenant(capture):
    config = capture.config
    request = capture_pb2.CaptureRequest(events=[raw_event(event_id="ok"), raw_event(event_id="x", tenant_id="globex")])
    response = stub(capture).Capture(request, metadata=(("authorization", "Bearer acme-token"),))
    assert response.accepted == 1
    assert [(r.index, r.reason) for r in response.rejected] == [(1, "tenant_mismatch")]
    events = events_of(read_topic(config, config.kafka.session_events_topic, want=1))
    assert [(e.event_id, e.tenant_id) for e in events] == [("ok", "acme")]
    letters = [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want=1)]
    assert [(d["reason"], d["tenant_id"], d["source"]) for d in letters] == [("tenant_mismatch", "acme", "ingest")]


def test_bad_events_are_dead_lettered_without_losing_good_neighbours(capture, caplog):
    config = capture.config
    good = raw_event(event_id="good")
    skewed = raw_event(event_id="skew", session_id="s2", event_time_ms=int(time.time() * 1000) + 3_600_000)
    unknown = raw_event(event_id="unk", session_id="never-started")
    unknown.user_message.text = "hi"
    framed = b"".join(b"\x0a" + bytes([len(b)]) + b for b in
                      [good.SerializeToString(), b"\x12\x02\xff\xfe", skewed.SerializeToString(),
                       unknown.SerializeToString(), b"\x08\x01\x10"])
    call = grpc.insecure_channel(capture.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    with caplog.at_level("WARNING", logger="liverl.ingest.capture"):
        response = call(framed, metadata=(("authorization", "Bearer acme-token"),))
    assert response.accepted == 1
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "liverl.ingest.capture"]
    assert [(line["accepted"], line["rejected"], line["tenant"]) for line in lines] == [(1, 4, "acme")]
    assert [(r.index, r.reason) for r in response.rejected] == [
        (1, "invalid_utf8"), (2, "clock_skew"), (3, "unknown_session"), (4, "invalid_protobuf")]
    letters = [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want=4)]
    assert sorted(d["reason"] for d in letters) == ["clock_skew", "invalid_protobuf", "invalid_utf8",
                                                    "unknown_session"]
    assert base64.b64decode(next(d for d in letters if d["reason"] == "invalid_utf8")["payload_b64"]) == \
        b"\x12\x02\xff\xfe"
    samples = capture.metrics.registry
    assert samples.get_sample_value("liverl_ingest_events_rejected_total", {"reason": "clock_skew"}) == 1
    with pytest.raises(grpc.RpcError) as caught:
        call(b"\x0a\x09ab", metadata=(("authorization", "Bearer acme-token"),))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_closed_sessions_take_late_feedback_but_nothing_else(capture, tmp_path):
    config = capture.config
    client = CaptureClient(capture.grpc_address, "acme-token", tmp_path / "sdk")
    s = client.start_session(task_family="coding", user_id="u1")
    s.end("completed")
    s.tool_call("edit", "{}")  # after the end: refused
    client.feedback(s.session_id, FeedbackKind.THUMBS_UP)  # late on purpose: accepted
    assert client.flush(timeout_s=30)
    stats = client.stats()
    client.close()
    assert stats["sent"] == 3 and stats["rejected_by_reason"] == {"closed_session": 1}
    kinds = [e.WhichOneof("body") for e in events_of(read_topic(config, config.kafka.session_events_topic, 3))]
    assert kinds == ["session_start", "session_end", "feedback"]


def test_opted_out_tenants_and_users_are_dropped_at_the_edge(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool", opt_out_tenants=["globex"],
                            opt_out_users={"acme": ["private-user"]})
    server = CaptureServer(config).start()
    try:
        acme = CaptureClient(server.grpc_address, "acme-token", None)
        globex = CaptureClient(server.grpc_address, "globex-token", None)
        acme.start_session(user_id="private-user").user_message("secret stuff")
        acme.start_session(user_id="public-user").user_message("fine")
        globex.start_session(user_id="anyone").user_message("all dropped")
        assert acme.flush(30) and globex.flush(30)
        assert acme.stats()["dropped_opt_out"] == 2 and acme.stats()["sent"] == 2
        assert globex.stats()["dropped_opt_out"] == 2 and globex.stats()["sent"] == 0
        acme.close(), globex.close()
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=2))
        from liverl.privacy import key_store
        from liverl.privacy.pseudonyms import Pseudonyms

        assert {e.user_id for e in events} == {Pseudonyms(key_store(config)).user("acme", "public-user")}
        assert server.metrics.registry.get_sample_value("liverl_ingest_events_dropped_total",
                                                        {"reason": "opt_out"}) == 4
    finally:
        server.stop()
