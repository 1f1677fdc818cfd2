"""The SDK writes nothing users wrote to disk: what waits in its spool while the service is down, and what it
dead-letters locally, is redacted as the capture service redacts, but for ids, kept as the product gave them;
the service pseudonymises them with the tenant's key, so a spooled session still joins up with the events sent
straight to the service once it is back (the same pseudonym for an id that held an email)."""

from __future__ import annotations

from pathlib import Path

from ingest.sdk import CaptureClient
from liverl.io import processes
from tests.ingest.conftest import capture_config, events_of, read_topic

EMAIL, CARD = "dave.marker@example.com", "4111 1111 1111 1111"
SESSION = "conv-erin.id@example.com"  # an id holding personal data: pseudonymised by the service, not masked


def _disk_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


def _markers_in(raw: bytes) -> list[str]:
    return [marker for marker in (EMAIL, CARD, CARD.replace(" ", ""), "dave.marker") if marker.encode() in raw]


def test_the_spool_holds_events_redacted_and_they_still_arrive_whole(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "service-spool")
    client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "acme-token", tmp_path / "sdk",
                           request_timeout_s=2, redaction=config.ingest.redaction)
    session = client.start_session(task_family="coding", user_id="u1", session_id=SESSION,
                                   attributes={"contact": EMAIL})
    session.user_message(f"mail {EMAIL}, card {CARD}")
    session.tool_result("call-1", f"paid with {CARD}")
    processes.wait_until(lambda: client.stats()["spooled"] >= 3, 30, "SDK spooling to disk")
    assert _disk_bytes(tmp_path / "sdk") and _markers_in(_disk_bytes(tmp_path / "sdk")) == []
    assert SESSION.encode() in _disk_bytes(tmp_path / "sdk")  # the id as the product gave it: the service keys it

    server = CaptureServer(config).start()  # back: the spooled events go first, then the end, sent directly
    try:
        session.end("completed")
        assert client.flush(timeout_s=60), client.stats()
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=4))
        pseudonym = server.core.redactor_for("acme").redact_id(SESSION)  # under acme's key from the key store
    finally:
        client.close()
        server.stop()
    assert [e.WhichOneof("body") for e in events] == ["session_start", "user_message", "tool_result", "session_end"]
    assert {e.session_id for e in events} == {pseudonym} and pseudonym.startswith("redacted-email-")
    assert "[REDACTED:" in events[1].user_message.text and _markers_in(b"".join(e.SerializeToString()
                                                                              for e in events)) == []


def test_events_dead_lettered_locally_are_redacted(fresh_topics, tmp_path):
    from ingest.service import CaptureServer
    from liverl.v1 import capture_pb2

    server = CaptureServer(capture_config(fresh_topics, tmp_path / "spool", handler_timeout_s=0.0)).start()
    try:
        client = CaptureClient(server.grpc_address, "acme-token", tmp_path / "sdk", max_attempts=2)
        client.start_session(user_id="u").user_message(f"never stored: {EMAIL} {CARD}")
        assert client.flush(timeout_s=30), client.stats()
        client.close()
    finally:
        server.stop()
    kept = (tmp_path / "sdk" / "dead-letters.capture").read_bytes()
    assert len(capture_pb2.CaptureRequest.FromString(kept).events) == 2  # still replayable as a request
    assert _markers_in(_disk_bytes(tmp_path / "sdk")) == []


def test_an_opted_out_user_is_still_dropped_after_the_spool(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "service-spool", opt_out_users={"acme": [EMAIL]})
    client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "acme-token", tmp_path / "sdk",
                           request_timeout_s=2, redaction=config.ingest.redaction)
    private = client.start_session(user_id=EMAIL)  # spooled as given: the service matches and keys it
    private.user_message("private words")
    public = client.start_session(user_id="bob")
    public.user_message("public words")
    processes.wait_until(lambda: client.stats()["spooled"] >= 4, 30, "SDK spooling to disk")

    server = CaptureServer(config).start()
    try:
        assert client.flush(timeout_s=60), client.stats()
        stats = client.stats()
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=3, timeout_s=5))
        bob = server.core.subjects.pseudonyms.user("acme", "bob")  # user ids reach Kafka as keyed pseudonyms
    finally:
        client.close()
        server.stop()
    assert stats["dropped_opt_out"] == 2 and stats["sent"] == 2
    assert {e.session_id for e in events} == {public.session_id} and {e.user_id for e in events} == {bob}
