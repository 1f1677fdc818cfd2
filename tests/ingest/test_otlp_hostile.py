"""POST /v1/traces as an attacker would use it, on the running capture service and the real broker: fan-out
bounded and charged per event, malformed and compressed bodies refused with a 4xx and a counted dead letter
that holds a summary (never the body), and an unexpected failure logged without the value that caused it."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import time
import zlib

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingest.conftest import capture_config, read_topic

ACME = {"authorization": "Bearer acme-token"}
PERSONAL = ("dave@example.com", "4111111111111111")


@pytest.fixture
def start_service(fresh_topics, tmp_path, tiny_policy_dir):
    """Starts the capture service (with the policy's tokenizer for /v1/traces) under ingest overrides."""
    from ingest.service import CaptureServer

    servers = []

    def start(**ingest):
        config = capture_config(fresh_topics, tmp_path / f"spool-{len(servers)}", **ingest)
        config.ingest.otlp_tokenizer_dir = tiny_policy_dir
        servers.append(CaptureServer(config).start())
        return servers[-1]
    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def _span(span_id: str, attributes: dict, conversation: str = "conv-1") -> dict:
    start = time.time() - 5
    return {"traceId": "ab" * 16, "spanId": span_id, "name": "chat",
            "startTimeUnixNano": str(int(start * 1e9)), "endTimeUnixNano": str(int((start + 0.5) * 1e9)),
            "attributes": [{"key": k, "value": {"stringValue": v}}
                           for k, v in {**attributes, "gen_ai.conversation.id": conversation}.items()]}


def _request(*spans: dict) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]}


def _chat(span_id: str, messages: list[dict], answer: dict, conversation: str = "conv-1") -> dict:
    return _span(span_id, {"gen_ai.operation.name": "chat", "gen_ai.prompt": json.dumps(messages),
                           "gen_ai.completion": json.dumps([answer])}, conversation)


def _letters(config, want: int, timeout_s: float = 30.0) -> list[dict]:
    return [json.loads(r.value) for r in read_topic(config, config.kafka.dead_letters_topic, want, timeout_s)]


def test_a_span_fanning_out_past_the_event_bound_is_refused_whole(start_service):
    service = start_service()
    calls = [{}] * 100_000  # each an (invalid) tool call event: a body of about 400 KB
    body = json.dumps(_request(_chat("01" * 8, [{"role": "user", "content": "go"}],
                                     {"role": "assistant", "content": "", "tool_calls": calls}))).encode()
    answer = httpx.post(f"http://{service.http_address}/v1/traces", content=body, timeout=120,
                        headers={**ACME, "content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["error"] == "too_many_events", answer.text[:300]
    assert "ingest.max_events_per_request" in answer.json()["message"]
    config = service.config
    (letter,) = [d for d in _letters(config, 1) if d["reason"] == "too_many_events"]
    assert json.loads(base64.b64decode(letter["payload_b64"]))["summary_of_refused_request"] is True
    assert not read_topic(config, config.kafka.session_events_topic, want=1, timeout_s=2)


def test_the_rate_limit_is_charged_per_event_not_per_span(start_service):
    service = start_service(rate_limit_events_per_s=0.01, rate_limit_burst_events=100)
    url = f"http://{service.http_address}/v1/traces"
    messages = [{"role": "user", "content": f"step {i}"} for i in range(60)]  # one span, about 62 events
    first = _request(_chat("01" * 8, messages, {"role": "assistant", "content": "ok"}, "conv-a"))
    second = _request(_chat("02" * 8, messages, {"role": "assistant", "content": "ok"}, "conv-b"))
    assert httpx.post(url, json=first, headers=ACME, timeout=60).status_code == 200
    refused = httpx.post(url, json=second, headers=ACME, timeout=60)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1


MALFORMED = {
    "resource_is_a_string": {"resourceSpans": [{"resource": "x", "scopeSpans": []}]},
    "int_value_not_a_number": _request(_span("01" * 8, {}) | {"attributes": [{"key": "k",
                                                                              "value": {"intValue": "abc"}}]}),
    "attributes_a_number": _request(_span("01" * 8, {}) | {"attributes": 5}),
    "status_a_string": _request(_span("01" * 8, {"gen_ai.operation.name": "execute_tool"}) | {"status": "bad"}),
    "spans_a_number": {"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]},
    "scope_spans_an_object": {"resourceSpans": [{"scopeSpans": {"spans": []}}]},
    "span_a_list": {"resourceSpans": [{"scopeSpans": [{"spans": [[1, 2]]}]}]},
}


def test_every_malformed_body_is_a_400_and_a_counted_dead_letter(start_service):
    service = start_service()
    url = f"http://{service.http_address}/v1/traces"
    for name, document in MALFORMED.items():
        answer = httpx.post(url, json=document, headers=ACME, timeout=30)
        assert answer.status_code == 400, (name, answer.status_code, answer.text[:200])
        assert answer.json()["error"] == "invalid_otlp" and answer.json()["message"], name
    letters = [d for d in _letters(service.config, len(MALFORMED)) if d["reason"] == "invalid_otlp"]
    assert len(letters) == len(MALFORMED)
    counted = service.core.metrics.dead_letters.labels("invalid_otlp")._value.get()
    assert counted == len(MALFORMED)


def _refused_compressed_bodies(limit: int) -> dict[str, tuple[bytes, dict]]:
    text = json.dumps(_request(_chat("01" * 8, [{"role": "user", "content": " ".join(PERSONAL)}],
                                     {"role": "assistant", "content": "ok"}))).encode()
    bad_crc = bytearray(gzip.compress(text))
    bad_crc[-8] ^= 0xFF  # the CRC32 of the gzip trailer
    too_large = gzip.compress(text + b" " * (limit + 10))  # inflates past max_request_bytes
    return {"gzip_too_large": (too_large, {"content-encoding": "gzip"}),
            "gzip_bad_crc": (bytes(bad_crc), {"content-encoding": "gzip"}),
            "deflate": (zlib.compress(text), {"content-encoding": "deflate"})}


def test_a_refused_compressed_body_is_dead_lettered_as_a_summary_never_as_sent(start_service):
    service = start_service()
    url = f"http://{service.http_address}/v1/traces"
    bodies = _refused_compressed_bodies(service.config.ingest.max_request_bytes)
    statuses = {name: httpx.post(url, content=body, headers={**ACME, "content-type": "application/json", **headers},
                                 timeout=60).status_code for name, (body, headers) in bodies.items()}
    assert statuses == {"gzip_too_large": 413, "gzip_bad_crc": 400, "deflate": 415}
    letters = _letters(service.config, len(bodies))
    assert len(letters) == len(bodies)
    for letter in letters:
        summary = json.loads(base64.b64decode(letter["payload_b64"]))  # a summary: JSON, not the body
        assert summary["summary_of_refused_request"] is True and summary["body_bytes"] > 0
        assert summary["content_encoding"] in ("gzip", "deflate") and summary["reason"] == letter["reason"]
        assert not any(value in json.dumps(letter) for value in PERSONAL)


def test_an_unexpected_failure_is_a_500_logged_without_the_value(start_service, monkeypatch):
    from ingest.importers import otlp

    def failing(document, source):
        raise ValueError(f"cannot use {PERSONAL[1]} of {PERSONAL[0]}")

    monkeypatch.setattr(otlp, "spans_of", failing)  # a bug met on client input, whatever it is
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(logging.Formatter().format(record))  # with any traceback
    service = start_service()  # first: uvicorn sets up its own loggers' handlers when it starts
    loggers = [logging.getLogger(), logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.disabled = False  # a logging config of another library may have disabled uvicorn's
    try:
        answer = httpx.post(f"http://{service.http_address}/v1/traces",
                            json=_request(_chat("01" * 8, [{"role": "user", "content": "hi"}],
                                                {"role": "assistant", "content": "ok"})), headers=ACME, timeout=30)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert answer.status_code == 500
    logged = "\n".join(lines)
    assert "ValueError" in logged
    assert not any(value in logged or value in answer.text for value in PERSONAL), logged[-2000:]


# Any JSON: the shapes OTLP uses (objects of lists of objects) with any leaves and wrong types anywhere.
_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=12))
_JSON = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["resourceSpans", "resource", "scopeSpans", "spans", "attributes", "key", "value",
                     "stringValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "values", "status",
                     "code", "events", "name", "traceId", "spanId", "startTimeUnixNano"]), inner, max_size=4),
    max_leaves=12)
_ANY_VALUE = st.dictionaries(st.sampled_from(["stringValue", "intValue", "doubleValue", "boolValue", "arrayValue",
                                              "kvlistValue", "bytesValue"]), _JSON, max_size=2)
_ATTRIBUTE = st.fixed_dictionaries({"key": st.sampled_from(["gen_ai.operation.name", "gen_ai.prompt",
                                                            "gen_ai.completion", "gen_ai.conversation.id", "x"]),
                                    "value": _ANY_VALUE | _JSON})
_SPAN = st.fixed_dictionaries({}, optional={"traceId": _JSON | st.just("ab" * 16), "spanId": _JSON,
                                            "attributes": st.lists(_ATTRIBUTE, max_size=4) | _JSON,
                                            "status": _JSON, "events": _JSON, "startTimeUnixNano": _JSON})
_DOCUMENT = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries({}, optional={
    "resource": _JSON | st.fixed_dictionaries({"attributes": st.lists(_ATTRIBUTE, max_size=2)}),
    "scopeSpans": st.lists(st.fixed_dictionaries({}, optional={"spans": st.lists(_SPAN, max_size=3) | _JSON}),
                           max_size=2) | _JSON}), max_size=2) | _JSON})


def test_no_otlp_json_shape_gets_a_5xx(start_service):
    service = start_service()
    url = f"http://{service.http_address}/v1/traces"
    answers: list[int] = []
    with httpx.Client(headers=ACME, timeout=30) as client:
        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(document=_DOCUMENT | _JSON)
        def post(document):
            answer = client.post(url, json=document)
            answers.append(answer.status_code)
            assert answer.status_code < 500, (document, answer.text[:300])

        post()
    assert len(answers) == 150 and 400 in answers


def test_an_id_with_control_characters_is_refused_as_capture_refuses_it(start_service):
    """OTLP runs capture's own content rules (ingest/validation.py check_content): a conversation id with a control
    character is refused and dead-lettered, while the request's other conversation is stored."""
    service = start_service()
    good = _chat("01" * 8, [{"role": "user", "content": "go"}], {"role": "assistant", "content": "ok"}, "conv-ok")
    bad = _chat("02" * 8, [{"role": "user", "content": "go"}], {"role": "assistant", "content": "ok"}, "conv\x07bell")
    answer = httpx.post(f"http://{service.http_address}/v1/traces", json=_request(good, bad), headers=ACME, timeout=30)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "printable" in partial["errorMessage"], partial
    (letter,) = [d for d in _letters(service.config, 1) if d["reason"] == "unbuildable_session"]
    assert "printable" in letter["message"]
    events = read_topic(service.config, service.config.kafka.session_events_topic, want=3)
    assert events and all(b"\x07" not in (r.key or b"") for r in events)
