"""The SDK: the caller never waits on the network, memory stays bounded, drops are reported, and what
the service could not take waits on disk and arrives, in order, once it is back."""

from __future__ import annotations

from ingest.sdk import CaptureClient
from liverl.io import processes
from tests.ingest.conftest import assert_sessions_complete, capture_config, events_of, read_topic


def test_unreachable_service_events_wait_on_disk_then_arrive_in_order(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "service-spool")
    client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "acme-token", tmp_path / "sdk", request_timeout_s=2)
    session = client.start_session(task_family="coding", user_id="u1")
    for step in range(30):
        session.user_message(f"step {step}")
    processes.wait_until(lambda: client.stats()["spooled"] >= 31, 30, "SDK spooling to disk")
    assert not client.flush(timeout_s=0.5)
    server = CaptureServer(config).start()  # the service comes (back) up
    try:
        session.end("completed")
        assert client.flush(timeout_s=60), client.stats()
        stats = client.stats()
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=32))
    finally:
        client.close()
        server.stop()
    assert stats["sent"] == 32 and stats["dropped"] == 0 and stats["spool_pending"] == 0 and stats["retries"] > 0
    assert_sessions_complete(events, {session.session_id: 32})


def test_a_full_queue_drops_the_newest_and_says_so(tmp_path):
    from liverl.io.processes import free_port

    client = CaptureClient(f"127.0.0.1:{free_port()}", "t", None, max_queue_events=5, batch_size=2,
                           request_timeout_s=1)
    session = client.start_session(user_id="u")
    for step in range(19):
        session.user_message(f"m{step}")
    stats = client.stats()
    client.close(timeout_s=0.2)
    assert stats["recorded"] == 20
    assert stats["dropped"] >= 20 - 5 - 2  # at most the queue plus one batch in flight is kept
    assert stats["queued"] + stats["in_flight"] <= 5 + 2
    assert client.stats()["dropped"] == 20 - client.stats()["sent"]  # without a spool, close reports the rest lost


def test_what_is_unsent_at_close_is_sent_by_the_next_client_on_the_same_spool(capture, tmp_path):
    from liverl.io.processes import free_port

    away = CaptureClient(f"127.0.0.1:{free_port()}", "acme-token", tmp_path / "sdk", request_timeout_s=1)
    session = away.start_session(user_id="u1")
    for step in range(5):
        session.user_message(f"m{step}")
    away.close(timeout_s=0.5)
    assert away.stats()["spool_pending"] == 6 and away.stats()["sent"] == 0  # waiting on disk
    back = CaptureClient(capture.grpc_address, "acme-token", tmp_path / "sdk")
    try:
        assert back.flush(timeout_s=30), back.stats()
        assert back.stats()["sent"] == 6
    finally:
        back.close()
    events = events_of(read_topic(capture.config, capture.config.kafka.session_events_topic, want=6))
    assert_sessions_complete(events, {session.session_id: 6})
