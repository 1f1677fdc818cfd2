"""Split a serialized CaptureRequest into its events' raw bytes without parsing them.

gRPC would otherwise parse the whole request at once, and one event with invalid UTF-8 or a wrong
wire type would fail the whole batch. Splitting first lets each event be parsed, rejected and
dead-lettered on its own, so one bad event never loses its good neighbours. A request with nothing
wrong in it (the usual case) is parsed whole instead, in one call of the C parser (`parsed_events`):
the pure-Python split and a parse call per event cost more than the parse itself.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from liverl.v1 import capture_pb2

EVENTS_FIELD = 1  # CaptureRequest.events


class MalformedRequest(ValueError):
    """The request's own framing is broken: no event boundary can be trusted."""


def parsed_events(raw: bytes) -> list | None:
    """Every event of the request, parsed (SessionEvent), when the whole request parses; None when any
    part of it does not (broken framing, a malformed event, invalid UTF-8): then split it with
    split_events and parse each event on its own, so the bad ones are told apart from the good."""
    try:
        return list(capture_pb2.CaptureRequest.FromString(raw).events)
    except (DecodeError, RecursionError, ValueError):  # whatever it is, the careful path tells
        return None


def split_events(raw: bytes) -> list[bytes]:
    """The bytes of each CaptureRequest.events entry, in order; other fields are skipped."""
    events: list[bytes] = []
    position, end = 0, len(raw)
    while position < end:
        tag, position = _varint(raw, position)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise MalformedRequest("field number 0 is not valid protobuf")
        if wire_type == 0:
            _, position = _varint(raw, position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 5:
            position += 4
        elif wire_type == 2:
            length, position = _varint(raw, position)
            if position + length > end:
                raise MalformedRequest("a length-delimited field runs past the end of the request")
            if field == EVENTS_FIELD:
                events.append(raw[position:position + length])
            position += length
        else:
            raise MalformedRequest(f"wire type {wire_type} is not supported in a CaptureRequest")
        if position > end:
            raise MalformedRequest("a fixed-size field runs past the end of the request")
    return events


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= len(raw):
            raise MalformedRequest("a varint runs past the end of the request")
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise MalformedRequest("a varint is longer than 10 bytes")
