"""The record constructors: every kind's key and headers, the dead-letter envelope, and that no stage builds
either itself (one copy, in liverl/io/records.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from liverl.contracts import names
from liverl.io import records
from liverl.io.kafka_writer import Record

ROOT = Path(__file__).resolve().parents[3]
STAGES = ("ingest", "serving", "pipelines", "trainer")


def test_a_session_record_is_keyed_by_tenant_and_session_with_the_three_headers():
    record = records.session_record("t.calls", records.MODEL_CALL, "acme", "s-1", b"\x08\x01", 1_700_000_000_000)

    assert record == Record("t.calls", b"acme/s-1", b"\x08\x01", (
        (names.HEADER_SCHEMA_VERSION, str(names.EVENT_SCHEMA_VERSION).encode()),
        (names.HEADER_TENANT, b"acme"), (names.HEADER_KIND, b"model-call")), 1_700_000_000_000)
    assert Record.decode(record.encode()) == record  # what the spool keeps is what Kafka gets


def test_a_dead_letter_is_the_json_envelope_under_its_session_key():
    record = records.dead_letter("t.dead", source="serving", reason="bad_request", message="max_tokens < 1",
                                 tenant_id="acme", session_id="s-2", payload=b'{"api":"chat"}', at_ms=42)

    envelope = json.loads(record.value)
    assert envelope == {"reason": "bad_request", "message": "max_tokens < 1", "source": "serving",
                        "tenant_id": "acme", "session_id": "s-2",
                        "payload_b64": base64.b64encode(b'{"api":"chat"}').decode(), "at_ms": 42}
    assert record.key == b"acme/s-2" and dict(record.headers)[names.HEADER_KIND] == b"dead-letter"
    assert record.event_time_ms == 0


def test_a_tenant_with_a_slash_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="names without '/'"):
        records.session_record("t", records.SESSION_EVENT, "a/b", "s", b"")


@pytest.mark.parametrize("built_here", ["names.HEADER_KIND", '"payload_b64"'])
def test_no_stage_builds_record_headers_or_dead_letters_itself(built_here):
    copies = [str(path.relative_to(ROOT)) for stage in STAGES for path in sorted((ROOT / stage).rglob("*.py"))
              if built_here in path.read_text(encoding="utf-8")]
    assert copies == [], f"{built_here} used in {copies}: build records with liverl/io/records.py instead"
