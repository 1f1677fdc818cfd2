"""A session whose id holds personal data is keyed on Kafka by the pseudonym its records carry, on every
path (capture events and dead letters, OTLP events and model calls, `liverl import`), so no key holds the
raw id and a session's events, calls and dead letters share one key (one partition, one order)."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from liverl.v1 import model_call_pb2, session_event_pb2
from tests.conftest import stored_key
from tests.ingest.conftest import capture_config, read_topic

ACME = {"authorization": "Bearer acme-token"}
RAW_SESSION = "conv-dave@example.com"


def _value_session(topic: str, config, value: bytes) -> str:
    if topic == config.kafka.session_events_topic:
        return session_event_pb2.SessionEvent.FromString(value).session_id
    if topic == config.kafka.model_calls_topic:
        return model_call_pb2.ModelCall.FromString(value).session_id
    return json.loads(value)["session_id"]


def _assert_keyed_by_the_pseudonym(config, records) -> None:
    assert records
    for record in records:
        session = _value_session(record.topic, config, record.value)
        assert "dave@example.com" not in record.key.decode() and "dave@example.com" not in session
        assert session.startswith("redacted-email-"), session
        assert record.key == stored_key(config, "acme", session), (record.topic, record.key)


def test_capture_events_and_dead_letters_are_keyed_by_the_pseudonym(capture):
    config = capture.config
    now = int(time.time() * 1000)

    def event(**body) -> dict:
        return {"eventId": uuid.uuid4().hex, "sessionId": RAW_SESSION, "schemaVersion": 1, "eventTimeMs": now, **body}
    answer = httpx.post(f"http://{capture.http_address}/v1/capture", headers=ACME, json={"events": [
        event(sessionStart={"taskFamily": "coding"}), event(userMessage={"text": "hi"}, sequence=1),
        event(outcome={"score": 2.0}, sequence=2)]})  # out of [0, 1]: refused, dead-lettered
    assert answer.status_code == 200 and answer.json()["accepted"] == 2
    records = read_topic(config, config.kafka.session_events_topic, want=2)
    records += read_topic(config, config.kafka.dead_letters_topic, want=1)
    _assert_keyed_by_the_pseudonym(config, records)
    assert len({r.key for r in records}) == 1


def test_otlp_events_and_model_calls_are_keyed_by_the_pseudonym(fresh_topics, tmp_path, tiny_policy_dir):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool")
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    server = CaptureServer(config).start()
    try:
        start = time.time() - 5
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": RAW_SESSION,
                      "gen_ai.prompt": json.dumps([{"role": "user", "content": "hi"}]),
                      "gen_ai.completion": json.dumps([{"role": "assistant", "content": "ok"}])}
        span = {"traceId": "ab" * 16, "spanId": "01" * 8, "startTimeUnixNano": str(int(start * 1e9)),
                "endTimeUnixNano": str(int((start + 0.5) * 1e9)),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]}
        answer = httpx.post(f"http://{server.http_address}/v1/traces", headers=ACME, timeout=60,
                            json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
        assert answer.status_code == 200 and answer.json() == {}, answer.text
        records = read_topic(config, config.kafka.session_events_topic, want=2)
        records += read_topic(config, config.kafka.model_calls_topic, want=1)
        _assert_keyed_by_the_pseudonym(config, records)
        assert {r.topic for r in records} == {config.kafka.session_events_topic, config.kafka.model_calls_topic}
        assert len({r.key for r in records}) == 1
    finally:
        server.stop()
