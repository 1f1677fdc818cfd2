"""Bounded resources: per-tenant rate limits, request body limits (enforced while streaming), and the
window that acknowledges a resent event without storing it twice."""

from __future__ import annotations

import time
import uuid

import grpc
import httpx
import pytest

from ingest.admission import RateLimited, RecentEvents, TenantRateLimiter
from ingest.sdk.sender import _frame
from liverl.v1 import capture_pb2, session_event_pb2
from tests.ingest.conftest import capture_config

AUTH = (("authorization", "Bearer acme-token"),)


def test_a_bucket_refills_at_its_rate_and_tenants_do_not_share_it():
    now = [0.0]
    limiter = TenantRateLimiter(events_per_s=10, burst=20, clock=lambda: now[0])
    limiter.take("acme", 20)
    with pytest.raises(RateLimited) as caught:
        limiter.take("acme", 5)
    assert caught.value.retry_after_s == pytest.approx(0.5)
    limiter.take("globex", 20)  # its own bucket
    now[0] = 0.5
    limiter.take("acme", 5)
    now[0] = 100.0
    limiter.take("acme", 10_000)  # bigger than the burst: waits for a full bucket, never forever
    TenantRateLimiter(events_per_s=0, burst=1).take("acme", 10**9)  # 0 disables


def test_recent_events_forget_the_oldest_first():
    recent = RecentEvents(capacity=2)
    recent.add([("acme", "1"), ("acme", "2"), ("acme", "3")])
    assert ("acme", "1") not in recent and ("acme", "3") in recent and ("globex", "3") not in recent


def start_event() -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex, schema_version=1,
                                           event_time_ms=int(time.time() * 1000))
    event.session_start.task_family = "coding"
    return event


@pytest.fixture
def limited(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool", rate_limit_events_per_s=0.01,
                            rate_limit_burst_events=4, max_request_bytes=1 << 20)
    server = CaptureServer(config).start()
    yield server
    server.stop()


def test_over_the_rate_grpc_says_resource_exhausted_and_http_429_with_retry_after(limited):
    call = grpc.insecure_channel(limited.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    assert call(b"".join(_frame(start_event().SerializeToString()) for _ in range(4)), metadata=AUTH).accepted == 4
    with pytest.raises(grpc.RpcError) as caught:
        call(_frame(start_event().SerializeToString()), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert float(dict(caught.value.trailing_metadata())["retry-after-s"]) > 0
    answer = httpx.post(f"http://{limited.http_address}/v1/capture", headers={"authorization": "Bearer acme-token"},
                        json={"events": [{}]})
    assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
    globex = call(_frame(start_event().SerializeToString()), metadata=(("authorization", "Bearer globex-token"),))
    assert globex.accepted == 1  # another tenant's bucket is untouched
    assert limited.metrics.registry.get_sample_value("liverl_ingest_requests_rejected_total",
                                                     {"reason": "rate_limited"}) == 2


def test_huge_bodies_are_refused_without_being_read_whole(limited):
    url = f"http://{limited.http_address}/v1/capture"
    headers = {"authorization": "Bearer acme-token"}
    declared = httpx.post(url, headers=headers, content=b"x" * (40 << 20))  # Content-Length says 40 MB
    assert declared.status_code == 413 and "max_request_bytes" in declared.json()["message"]

    def stream():  # no Content-Length: the limit is enforced while the chunks arrive
        for _ in range(40):
            yield b" " * (1 << 20)

    try:
        streamed = httpx.post(url, headers=headers, content=stream())
        assert streamed.status_code == 413
    except (httpx.WriteError, httpx.RemoteProtocolError):
        pass  # the service answered and closed before the client finished sending: refused either way
    call = grpc.insecure_channel(limited.grpc_address).unary_unary(
        "/liverl.v1.CaptureService/Capture", request_serializer=None,
        response_deserializer=capture_pb2.CaptureResponse.FromString)
    with pytest.raises(grpc.RpcError) as caught:
        call(b"\x0a" * (2 << 20), metadata=AUTH)  # over grpc.max_receive_message_length
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert httpx.get(f"http://{limited.http_address}/healthz").status_code == 200
