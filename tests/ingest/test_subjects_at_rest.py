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


def _linked(keys, user_id: str, session_id: str) -> bool:
    """Whether the key store links the session (as its records are keyed) to the user's pseudonym."""
    pseudonyms = Pseudonyms(FileKeyStore(keys))
    user = pseudonyms.user("acme", user_id)
    return pseudonyms.session("acme", session_id) in FileKeyStore(keys).subjects_of("acme", user)


def test_otlp_spans_store_their_user_as_its_pseudonym_linked_to_the_session(fresh_topics, tmp_path, tiny_policy_dir):
    import time

    import httpx

    from ingest.service import CaptureServer
    from tests.ingest.test_otlp_endpoint import ACME, _attribute, _chat, _request

    config = capture_config(fresh_topics, tmp_path / "spool")
    config.privacy.keys_dir = tmp_path / "keys"
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    server = CaptureServer(config).start()
    try:
        span = _chat("01" * 8, time.time() - 1, "hello", conversation="conv-otlp-dave")
        span["attributes"].append(_attribute("user.id", USER))  # an email: redaction alone would erase who it is
        answer = httpx.post(f"http://{server.http_address}/v1/traces", json=_request(span), headers=ACME)
        assert answer.status_code == 200, answer.text
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=2))
    finally:
        server.stop()
    user = Pseudonyms(FileKeyStore(tmp_path / "keys")).user("acme", USER)
    assert events and {e.user_id for e in events} == {user}
    assert _linked(tmp_path / "keys", USER, events[0].session_id)  # `liverl forget --user` finds the session


def test_import_stores_the_user_its_source_names_as_its_pseudonym_linked_to_the_session(fresh_topics, tmp_path):
    import json

    from tests.ingest.importers.conftest import make_tokenizer_dir, run_import, source_words

    config = fresh_topics.model_copy(deep=True)
    config.privacy.keys_dir = tmp_path / "keys"
    request = {"model": "m", "messages": [{"role": "user", "content": "fix it"}], "user": USER,
               "metadata": {"session_id": "conv-import-dave"}}
    log = tmp_path / "calls.jsonl"
    log.write_text(json.dumps({"request": request, "response": {"created": 1767225600, "choices": [
        {"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}}) + "\n")
    tokenizer = make_tokenizer_dir(tmp_path / "tok", source_words("openai-chat", [log]))
    code, out = run_import(config, ["--format", "openai-chat", "--tenant", "acme", "--tokenizer", str(tokenizer),
                                    "--spool-dir", str(tmp_path / "spool"), str(log)])  # no --user: the log names him
    assert code == 0 and "imported 1 sessions" in out, out
    events = [e for e in events_of(read_topic(config, config.kafka.session_events_topic, want=2))
              if e.session_id == "conv-import-dave"]
    user = Pseudonyms(FileKeyStore(tmp_path / "keys")).user("acme", USER)
    assert events and {e.user_id for e in events} == {user}
    assert _linked(tmp_path / "keys", USER, "conv-import-dave")
