"""Splitting a CaptureRequest into per-event bytes without parsing the events, and parsing a sound one whole."""

from __future__ import annotations

import pytest

from ingest.sdk.sender import _frame, _request
from ingest.wire import MalformedRequest, parsed_events, split_events
from liverl.v1 import capture_pb2, session_event_pb2


def test_split_matches_the_generated_parser():
    events = [session_event_pb2.SessionEvent(event_id=f"e{i}", session_id="s" * i) for i in range(1, 200, 37)]
    raw = capture_pb2.CaptureRequest(events=events).SerializeToString()
    assert split_events(raw) == [e.SerializeToString() for e in events]
    assert b"".join(_frame(e.SerializeToString()) for e in events) == raw
    assert _request([e.SerializeToString() for e in events]) == raw


def test_an_event_with_broken_utf8_is_still_split_out_on_its_own():
    good = session_event_pb2.SessionEvent(event_id="e1").SerializeToString()
    bad = b"\x12\x02\xff\xfe"  # session_id with invalid UTF-8
    assert split_events(_frame(good) + _frame(bad) + _frame(good)) == [good, bad, good]


@pytest.mark.parametrize("raw", [b"\x0a\x05ab", b"\x0a", b"\x0b", b"\x80" * 11, b"\x00\x01"])
def test_broken_framing_is_a_malformed_request(raw):
    with pytest.raises(MalformedRequest):
        split_events(raw)


def test_a_sound_request_is_parsed_whole_into_the_same_events():
    events = [session_event_pb2.SessionEvent(event_id=f"e{i}", session_id="s" * i) for i in range(1, 300, 37)]
    raw = _request([e.SerializeToString() for e in events])
    assert parsed_events(raw) == [session_event_pb2.SessionEvent.FromString(b) for b in split_events(raw)]


@pytest.mark.parametrize("raw", [b"\x0a\x05ab", b"\x0a\x04\x12\x02\xff\xfe", b"\x00\x01"])
def test_a_request_with_anything_malformed_is_not_parsed_whole(raw):
    assert parsed_events(raw) is None  # the caller splits it and parses each event on its own
