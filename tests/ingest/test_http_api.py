"""The HTTP JSON endpoint for products not written in Python: statuses, per-event rejections, metrics."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from tests.ingest.conftest import events_of, read_topic

AUTH = {"authorization": "Bearer acme-token"}


def json_event(session_id: str, **body) -> dict:
    return {"eventId": uuid.uuid4().hex, "sessionId": session_id, "schemaVersion": 1,
            "eventTimeMs": int(time.time() * 1000), **body}


def test_json_events_are_captured_and_bad_ones_rejected_individually(capture):
    url = f"http://{capture.http_address}/v1/capture"
    events = [json_event("h1", sessionStart={"taskFamily": "search"}),
              json_event("h1", userMessage={"text": 42}),
              json_event("h1", toolCall={"callId": "c1", "name": "search", "argumentsJson": "{}"}, sequence=2)]
    response = httpx.post(url, headers=AUTH, json={"events": events})
    assert response.status_code == 200
    body = response.json()
    assert body["accepted"] == 2
    assert [(r["index"], r["reason"]) for r in body["rejected"]] == [(1, "wrong_type")]
    kinds = [e.WhichOneof("body") for e in events_of(read_topic(capture.config,
                                                                capture.config.kafka.session_events_topic, 2))]
    assert kinds == ["session_start", "tool_call"]


def test_http_statuses(capture):
    url = f"http://{capture.http_address}/v1/capture"
    assert httpx.post(url, json={"events": []}).status_code == 401
    assert httpx.post(url, headers={"authorization": "Bearer nope"}, json={"events": []}).status_code == 401
    assert httpx.post(url, headers={**AUTH, "x-liverl-tenant": "globex"}, json={"events": []}).status_code == 403
    bad_utf8 = httpx.post(url, headers=AUTH, content=b'{"events": ["\xff"]}')
    assert bad_utf8.status_code == 400 and bad_utf8.json()["error"] == "invalid_utf8"
    assert httpx.post(url, headers=AUTH, content=b"{not json").json()["error"] == "invalid_json"
    assert httpx.post(url, headers=AUTH, json=[1]).json()["error"] == "wrong_type"
    too_many = httpx.post(url, headers=AUTH, json={"events": [{}] * 1001})
    assert too_many.status_code == 413 and "max_batch_events" in too_many.json()["message"]
    letters = [json.loads(r.value) for r in read_topic(capture.config, capture.config.kafka.dead_letters_topic, 4)]
    assert sorted(d["reason"] for d in letters) == ["invalid_json", "invalid_utf8", "too_many_events", "wrong_type"]
    health = httpx.get(f"http://{capture.http_address}/healthz").json()
    assert health == {"status": "ok", "kafka_direct": True}
    metrics = httpx.get(f"http://{capture.http_address}/metrics").text
    assert 'liverl_ingest_requests_rejected_total{reason="invalid_utf8"} 1.0' in metrics
