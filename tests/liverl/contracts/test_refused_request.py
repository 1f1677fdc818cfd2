"""The one dead-letter payload of a refused request, as ingest and serving both write it."""

import json

import pytest

from liverl.contracts.refused_request import MARKER, RefusedRequest

ALL_KEYS = {MARKER, "api", "reason", "body_bytes", "inflated_bytes", "content_type", "content_encoding", "fields",
            "unknown_fields", "error_params"}


def test_the_payload_has_one_shape_whoever_builds_it():
    ingest = RefusedRequest.of("otlp", "too_large", 900, inflated_bytes=5000, content_type="application/json",
                               content_encoding="gzip").encode()
    serving = RefusedRequest.of("http", "unknown-field", 42, fields=["prompt", "sk-live-secret"],
                                known_fields=["prompt", "model"], error_params=["prompt"]).encode()
    assert set(json.loads(ingest)) == set(json.loads(serving)) == ALL_KEYS
    assert json.loads(ingest)[MARKER] is True and json.loads(serving)[MARKER] is True


def test_unknown_field_names_are_counted_never_listed():
    refused = RefusedRequest.of("http", "bad", 10, fields=["model", "sk-live-abc", "dave@example.com"],
                                known_fields=["model", "messages"], error_params=["sk-live-abc.x", "model.name"])
    assert refused.fields == ("model",) and refused.unknown_fields == 2
    assert refused.error_params == ("model.name",)
    assert b"sk-live" not in refused.encode() and b"dave" not in refused.encode()


def test_declared_headers_and_error_params_are_bounded():
    refused = RefusedRequest.of("http", "bad", 1, content_type="x" * 1000, content_encoding="y" * 1000,
                                known_fields=["f"], error_params=[f"f.{i:02d}" for i in range(50)])
    assert len(refused.content_type) == len(refused.content_encoding) == 100
    assert len(refused.error_params) == 20


def test_a_payload_decodes_back_to_what_was_encoded():
    refused = RefusedRequest.of("grpc", "empty-prompt", 7, fields=["prompt"], known_fields=["prompt"],
                                error_params=["prompt"])
    assert RefusedRequest.decode(refused.encode()) == refused


@pytest.mark.parametrize("older, expected", [
    # ingest's summary before the shared contract: a marker, headers and sizes at the top level
    (b'{"api":"otlp","body_bytes":9,"content_encoding":"gzip","content_type":"application/json",'
     b'"inflated_bytes":40,"reason":"too_large","summary_of_refused_request":true}',
     RefusedRequest("otlp", "too_large", 9, inflated_bytes=40, content_type="application/json",
                    content_encoding="gzip")),
    # serving's before it: no marker and no reason, fields listed
    (b'{"api":"http","body_bytes":12,"fields":["prompt"],"unknown_fields":1,"error_params":["prompt"]}',
     RefusedRequest("http", "", 12, fields=("prompt",), unknown_fields=1, error_params=("prompt",))),
])
def test_payloads_written_before_the_contract_still_decode(older, expected):
    assert RefusedRequest.decode(older) == expected


@pytest.mark.parametrize("payload", [b'{"event_id": "e-1"}', b"[1, 2]"])
def test_a_payload_that_is_not_a_summary_is_refused(payload):
    with pytest.raises(ValueError, match="not a refused request's summary"):
        RefusedRequest.decode(payload)
