"""POST /v1/traces on the running capture service: GenAI spans become SessionEvents and ModelCalls on the
real broker, under the token's tenant, redacted, with bad spans dead-lettered and counted."""

from __future__ import annotations

import base64
import gzip
import json
import time

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from liverl.v1 import model_call_pb2
from tests.ingest.conftest import capture_config, events_of, read_topic

ACME = {"authorization": "Bearer acme-token"}


@pytest.fixture
def service(fresh_topics, tmp_path, tiny_policy_dir):
    """The capture service with its OTLP endpoint given the policy's tokenizer (ingest.otlp_tokenizer_dir)."""
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool")
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    server = CaptureServer(config).start()
    try:
        yield server
    finally:
        server.stop()


def _attribute(key: str, value) -> dict:
    kind = "intValue" if isinstance(value, int) else "doubleValue" if isinstance(value, float) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def _span(span_id: str, attributes: dict, start_s: float, conversation: str = "conv-1") -> dict:
    return {"traceId": "ab" * 16, "spanId": span_id, "name": attributes["gen_ai.operation.name"],
            "startTimeUnixNano": str(int(start_s * 1e9)), "endTimeUnixNano": str(int((start_s + 0.5) * 1e9)),
            "attributes": [_attribute(k, v) for k, v in {**attributes, "gen_ai.conversation.id": conversation}.items()]}


def _request(*spans: dict) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [_attribute("service.name", "agent")]},
                               "scopeSpans": [{"scope": {"name": "genai"}, "spans": list(spans)}]}]}


def _chat(span_id: str, start_s: float, text: str, **more) -> dict:
    messages = [{"role": "user", "parts": [{"type": "text", "content": text}]}]
    answer = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "call-1", "name": "edit",
                                               "arguments": {"file": "a.py"}}], "finish_reason": "tool_calls"}]
    return _span(span_id, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.request.temperature": 0.7,
                           "gen_ai.input.messages": json.dumps(messages),
                           "gen_ai.output.messages": json.dumps(answer)}, start_s, **more)


def _tool(span_id: str, start_s: float) -> dict:
    return _span(span_id, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "edit",
                           "gen_ai.tool.call.id": "call-1", "gen_ai.tool.call.result": "ok"}, start_s)


def test_genai_spans_become_redacted_events_and_model_calls_of_the_tokens_tenant(service):
    config, now = service.config, time.time()
    document = _request(_chat("01" * 8, now - 3, "fix a.py, mail me at jane.doe@example.com"), _tool("02" * 8, now - 2))
    answer = httpx.post(f"http://{service.http_address}/v1/traces", json=document, headers=ACME)
    assert answer.status_code == 200 and answer.json() == {}

    events = [e for e in events_of(read_topic(config, config.kafka.session_events_topic, want=4))
              if e.session_id == "conv-1"]
    kinds = [e.WhichOneof("body") for e in events]
    assert kinds == ["session_start", "user_message", "tool_call", "tool_result"]  # no end: it ends by idleness
    assert all(e.tenant_id == "acme" for e in events)
    assert "jane.doe@example.com" not in events[1].user_message.text
    (record,) = read_topic(config, config.kafka.model_calls_topic, want=1)
    call = model_call_pb2.ModelCall.FromString(record.value)
    assert (call.session_id, call.tenant_id, call.origin) == ("conv-1", "acme", "import:otlp")
    assert call.prompt_token_ids and call.completion_token_ids and not call.completion_logprobs
    assert events[2].tool_call.request_id == call.request_id and b"jane.doe" not in record.value

    # the same batch again (an exporter retry): acknowledged, nothing stored twice
    assert httpx.post(f"http://{service.http_address}/v1/traces", json=document, headers=ACME).status_code == 200
    again = events_of(read_topic(config, config.kafka.session_events_topic, want=5, timeout_s=3))
    assert len([e for e in again if e.session_id == "conv-1"]) == 4


def test_protobuf_and_gzip_are_accepted_and_answered_in_kind(service):
    config, now = service.config, time.time()
    document = _request(_chat("03" * 8, now - 1, "search the docs", conversation="conv-pb"))
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # protobuf JSON carries ids as base64
        span["traceId"], span["spanId"] = (base64.b64encode(bytes.fromhex(span[k])).decode() for k in ("traceId", "spanId"))
    body = gzip.compress(json_format.ParseDict(document, ExportTraceServiceRequest()).SerializeToString())
    answer = httpx.post(f"http://{service.http_address}/v1/traces", content=body,
                        headers={**ACME, "content-type": "application/x-protobuf", "content-encoding": "gzip"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-protobuf"
    assert not ExportTraceServiceResponse.FromString(answer.content).HasField("partial_success")
    calls = [model_call_pb2.ModelCall.FromString(r.value)
             for r in read_topic(config, config.kafka.model_calls_topic, want=1)]
    assert [c.session_id for c in calls] == ["conv-pb"]


def test_refusals_auth_bad_bodies_and_bad_spans(service):
    config, now, url = service.config, time.time(), f"http://{service.http_address}/v1/traces"
    assert httpx.post(url, json=_request()).status_code == 401
    assert httpx.post(url, json=_request(), headers={**ACME, "x-liverl-tenant": "globex"}).status_code == 403
    assert httpx.post(url, content=b"{not json", headers=ACME).status_code == 400
    assert httpx.post(url, json={"spans": []}, headers=ACME).status_code == 400
    assert httpx.post(url, content=b"\xff\x00", headers={**ACME, "content-type": "application/x-protobuf"}
                      ).status_code == 400
    bomb = gzip.compress(b" " * (config.ingest.max_request_bytes + 10))
    assert httpx.post(url, content=bomb, headers={**ACME, "content-encoding": "gzip"}).status_code == 413

    no_messages = _span("04" * 8, {"gen_ai.operation.name": "chat"}, now, conversation="conv-bad")
    too_old = _chat("05" * 8, now - 30 * 24 * 3600, "hello", conversation="conv-old")  # past max_event_age_s
    answer = httpx.post(url, json=_request(no_messages, too_old), headers=ACME)
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2" and "input messages" in partial["errorMessage"]
    letters = [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want=6)]
    assert {"invalid_span", "too_old"} <= {letter["reason"] for letter in letters}
    assert all(letter["tenant_id"] == "acme" for letter in letters)
    assert not read_topic(config, config.kafka.model_calls_topic, want=1, timeout_s=2)  # the old session's call too
