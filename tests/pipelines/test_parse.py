"""Record-level parsing: every malformed record becomes a dead letter with a reason, never an exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from liverl.contracts import names
from pipelines import dead_letters
from pipelines.parse import CALL, EVENT, Parsed, parse_record
from pipelines.records import RawRecord
from tests.pipelines.producing import call, coding_session

EVENTS, CALLS = "ev", "mc"


def _record(topic, value, headers=()):
    return RawRecord(topic, 0, 7, 0, b"s1", value, tuple(headers))


def test_events_and_calls_parse():
    events, calls = coding_session("s1")
    parsed = parse_record(_record(EVENTS, events[0].SerializeToString()), EVENTS, CALLS)
    assert isinstance(parsed, Parsed) and parsed.kind == EVENT and parsed.event_id == events[0].event_id
    assert parse_record(_record(CALLS, calls[0].SerializeToString()), EVENTS, CALLS).kind == CALL


def test_bad_records_get_their_reason():
    events, _ = coding_session("s1")
    no_id = events[0].__class__()
    no_id.CopyFrom(events[0])
    no_id.event_id = ""
    newer = call("s1", 0, "r", [1], [2])
    newer.schema_version = names.EVENT_SCHEMA_VERSION + 1
    cases = {
        dead_letters.MALFORMED_EVENT: [_record(EVENTS, b"\xff\xff\xff"), _record(EVENTS, no_id.SerializeToString())],
        dead_letters.UNSUPPORTED_SCHEMA: [
            _record(CALLS, newer.SerializeToString()),
            _record(EVENTS, events[0].SerializeToString(), [(names.HEADER_SCHEMA_VERSION, b"9")])],
        dead_letters.UNKNOWN_TOPIC: [_record("other", b"")],
    }
    for reason, records in cases.items():
        for record in records:
            letter = parse_record(record, EVENTS, CALLS)
            assert isinstance(letter, dict) and letter["reason"] == reason, (reason, letter)
            assert letter["source_offset"] == 7 and letter["payload"] == record.value


@settings(max_examples=200, deadline=None)
@given(value=st.binary(max_size=200), topic=st.sampled_from([EVENTS, CALLS]))
def test_arbitrary_bytes_never_raise(value, topic):
    result = parse_record(_record(topic, value), EVENTS, CALLS)
    assert isinstance(result, Parsed) or result["reason"] in dead_letters.REASONS
