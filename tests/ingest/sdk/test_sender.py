"""The SDK's retries are bounded and never duplicate: only unsettled events are resent, a batch the
service keeps failing on is dead-lettered locally, a rate-limited one waits and then arrives once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc

from ingest.sdk import CaptureClient
from ingest.wire import split_events
from liverl.v1 import capture_pb2, session_event_pb2
from tests.ingest.conftest import capture_config, events_of, read_topic


class HalfDone:
    """A stand-in capture service whose first answer settles the first half of the batch only."""

    def __init__(self):
        self.calls: list[list[bytes]] = []

    def capture(self, request: bytes, context) -> capture_pb2.CaptureResponse:
        events = split_events(request)
        self.calls.append(events)
        if len(self.calls) > 1:
            return capture_pb2.CaptureResponse(accepted=len(events))
        half = len(events) // 2
        return capture_pb2.CaptureResponse(accepted=half, rejected=[
            capture_pb2.Rejection(index=i, reason="deadline_exceeded", message="resend") for i in
            range(half, len(events))])


def _serve(capture):
    """A capture endpoint on 127.0.0.1 that answers with `capture(request bytes, context)`; (server, port)."""
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("liverl.v1.CaptureService", {
        "Capture": grpc.unary_unary_rpc_method_handler(
            capture, response_serializer=capture_pb2.CaptureResponse.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def test_a_partly_settled_batch_resends_only_the_rest():
    service = HalfDone()
    server, port = _serve(service.capture)
    try:
        client = CaptureClient(f"127.0.0.1:{port}", "t", None, batch_size=100)
        session = client.start_session(user_id="u")
        for step in range(9):
            session.user_message(f"m{step}")
        assert client.flush(timeout_s=30), client.stats()
        stats = client.stats()
        client.close()
    finally:
        server.stop(0)
    first, second = service.calls
    assert len(first) == 10 and second == first[5:]  # never the settled half again
    assert stats["sent"] == 10 and stats["rejected"] == 0 and stats["retries"] == 1


def test_a_batch_the_service_always_fails_on_is_dead_lettered_locally(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    server = CaptureServer(capture_config(fresh_topics, tmp_path / "spool", handler_timeout_s=0.0)).start()
    try:
        client = CaptureClient(server.grpc_address, "acme-token", tmp_path / "sdk", max_attempts=3)
        session = client.start_session(user_id="u")
        session.user_message("never stored")
        assert client.flush(timeout_s=30), client.stats()  # settled: not retried forever
        stats = client.stats()
        client.close()
    finally:
        server.stop()
    assert stats["dead_lettered"] == 2 and stats["sent"] == 0 and stats["retries"] == 2
    kept = (tmp_path / "sdk" / "dead-letters.capture").read_bytes()
    assert len(capture_pb2.CaptureRequest.FromString(kept).events) == 2  # replayable as a request


def test_a_rate_limited_client_waits_and_delivers_each_event_once(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool", rate_limit_events_per_s=5.0,
                            rate_limit_burst_events=5)
    server = CaptureServer(config).start()
    try:
        client = CaptureClient(server.grpc_address, "acme-token", tmp_path / "sdk", batch_size=5)
        session = client.start_session(user_id="u")
        for step in range(29):
            session.user_message(f"m{step}")
        assert client.flush(timeout_s=60), client.stats()
        stats = client.stats()
        client.close()
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=30))
    finally:
        server.stop()
    assert stats["sent"] == 30 and stats["dead_lettered"] == stats["rejected"] == 0 and stats["retries"] > 0
    assert len(events) == len({e.event_id for e in events}) == 30


class Recording:
    """A stand-in capture service that stores every request's events and accepts them all."""

    def __init__(self):
        self.calls: list[list[bytes]] = []

    def capture(self, request: bytes, context) -> capture_pb2.CaptureResponse:
        self.calls.append(split_events(request))
        return capture_pb2.CaptureResponse(accepted=len(self.calls[-1]))


def test_a_batch_over_the_request_size_goes_in_order_over_several_requests():
    from ingest.sdk.sender import BackgroundSender
    from ingest.sdk.session import SessionRecorder

    service = Recording()
    server, port = _serve(service.capture)
    try:
        sender = BackgroundSender(f"127.0.0.1:{port}", "t", None, batch_size=100, max_request_bytes=1000)
        session = SessionRecorder(sender.submit, "s1", "u")
        session._start("coding", "t1", 0, {})
        for step in range(39):
            session.user_message(f"message {step} " + "x" * 40)
        assert sender.flush(timeout_s=30), sender.stats()
        stats = sender.stats()
        sender.close(timeout_s=5)
    finally:
        server.stop(0)
    assert len(service.calls) > 3 and all(sum(map(len, call)) <= 1000 for call in service.calls)
    sent = [session_event_pb2.SessionEvent.FromString(blob) for call in service.calls for blob in call]
    assert [event.sequence for event in sent] == list(range(40))  # every event once, in recording order
    assert stats["sent"] == 40 and stats["queued"] == stats["in_flight"] == 0
