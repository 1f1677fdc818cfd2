"""What capture stores of a user: sealed values, a keyed user pseudonym, a session state without raw ids."""

from __future__ import annotations

from ingest.sdk import CaptureClient
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from tests.ingest.conftest import capture_config, events_of, read_topic

MARKER = "quokka-marker-9931"
USER = "dave@example.com"
SESSION = "conv-of-dave-77"


def send_session(server) -> None:
    client = CaptureClient(server.grpc_address, "acme-token", None)
    session = client.start_session(task_family="coding", user_id=USER, session_id=SESSION)
    session.user_message(f"please fix {MARKER}")
    session.end("completed")
    assert client.flush(timeout_s=30), client.stats()
    client.close()


def raw_topic(config, topic: str, want: int) -> list:
    """The records as Kafka holds them (not opened)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []])
        consumer.seek_to_beginning()
        records = []
        for _ in range(60):
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
            if len(records) >= want:
                return records
        return records
    finally:
        consumer.close()


def test_capture_stores_sealed_values_and_pseudonyms_only(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool")
    config.privacy.keys_dir = tmp_path / "keys"
    server = CaptureServer(config).start()
    try:
        send_session(server)
    finally:
        server.stop()
    raw = raw_topic(config, config.kafka.session_events_topic, want=3)
    assert len(raw) == 3
    assert all(MARKER.encode() not in r.value and USER.encode() not in r.value for r in raw)
    events = events_of(read_topic(config, config.kafka.session_events_topic, want=3))  # opened with the keys
    user = Pseudonyms(FileKeyStore(tmp_path / "keys")).user("acme", USER)
    assert {e.user_id for e in events} == {user} and user.startswith("u-")
    assert any(MARKER in e.user_message.text for e in events)
    state = b"".join(p.read_bytes() for p in (tmp_path / "spool").glob("sessions.sqlite*"))
    assert state and USER.encode() not in state and SESSION.encode() not in state
    session_subject = Pseudonyms(FileKeyStore(tmp_path / "keys")).session("acme", SESSION)
    assert FileKeyStore(tmp_path / "keys").subjects_of("acme", user) == [session_subject]


def test_switched_off_values_travel_plain_but_users_stay_pseudonymous(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool")
    config.privacy.keys_dir = tmp_path / "keys"
    config.privacy.encrypt_payloads = False
    server = CaptureServer(config).start()
    try:
        send_session(server)
    finally:
        server.stop()
    raw = raw_topic(config, config.kafka.session_events_topic, want=3)
    assert any(MARKER.encode() in r.value for r in raw) and all(USER.encode() not in r.value for r in raw)
