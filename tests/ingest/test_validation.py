"""Each way an event can be wrong has its reason and a message that says what to do."""

from __future__ import annotations

import pytest

from ingest.validation import Limits, Rejected, parse_binary, parse_json, validate
from liverl.v1 import session_event_pb2

NOW_MS = 1_800_000_000_000
LIMITS = Limits(max_event_bytes=1024, max_future_skew_ms=60_000, max_event_age_ms=3_600_000)


def good_event(**fields) -> session_event_pb2.SessionEvent:
    event = session_event_pb2.SessionEvent(event_id="e1", session_id="s1", schema_version=1, event_time_ms=NOW_MS,
                                           **fields)
    if event.WhichOneof("body") is None:
        event.user_message.text = "hello"
    return event


def reason_of(event, tenant="acme") -> str:
    with pytest.raises(Rejected) as caught:
        validate(event, tenant, NOW_MS, LIMITS)
    assert caught.value.message
    return caught.value.reason


def test_a_good_event_is_stamped_with_tenant_ingest_time_and_agent():
    event = good_event()
    validate(event, "acme", NOW_MS + 5, LIMITS)
    assert (event.tenant_id, event.ingest_time_ms, event.agent_id) == ("acme", NOW_MS + 5, "main")


@pytest.mark.parametrize("change, reason", [
    (dict(event_id=""), "invalid_schema"),
    (dict(session_id=""), "invalid_schema"),
    (dict(session_id="a\nb"), "invalid_schema"),
    (dict(schema_version=0), "invalid_schema"),
    (dict(schema_version=99), "unsupported_schema_version"),
    (dict(event_time_ms=0), "invalid_schema"),
    (dict(event_time_ms=NOW_MS + 120_000), "clock_skew"),
    (dict(event_time_ms=NOW_MS - 7_200_000), "too_old"),
    (dict(tenant_id="globex"), "tenant_mismatch"),
    (dict(agent_role=42), "invalid_value"),
])
def test_each_bad_field_has_its_reason(change, reason):
    event = good_event()
    for key, value in change.items():
        setattr(event, key, value)
    assert reason_of(event) == reason


def test_bodies_values_and_size_are_checked():
    assert reason_of(session_event_pb2.SessionEvent(event_id="e", session_id="s", schema_version=1,
                                                    event_time_ms=NOW_MS)) == "invalid_schema"
    assert reason_of(good_event(outcome=session_event_pb2.Outcome(score=1.5))) == "invalid_value"
    assert reason_of(good_event(feedback=session_event_pb2.Feedback(value=float("nan")))) == "invalid_value"
    assert reason_of(good_event(user_message=session_event_pb2.UserMessage(text="x" * 2000))) == "too_large"


def test_binary_parse_tells_invalid_utf8_from_garbage():
    raw = good_event().SerializeToString().replace(b"\x12\x02s1", b"\x12\x02\xff1")
    with pytest.raises(Rejected, match="UTF-8") as caught:
        parse_binary(raw)
    assert caught.value.reason == "invalid_utf8"
    with pytest.raises(Rejected) as caught:
        parse_binary(b"\x0a\x05ab")
    assert caught.value.reason == "invalid_protobuf"


@pytest.mark.parametrize("item, reason", [
    ([1, 2], "wrong_type"),
    ({"sequence": "abc"}, "wrong_type"),
    ({"eventId": 5}, "wrong_type"),
    ({"nope": 1}, "invalid_schema"),
    ({"sessionId": "\ud800"}, "invalid_utf8"),
])
def test_json_parse_reasons(item, reason):
    with pytest.raises(Rejected) as caught:
        parse_json(item)
    assert caught.value.reason == reason


HOSTILE_FIELDS = [
    (dict(agent_id="main\x1b[2J"), "invalid_value"),
    (dict(user_id="u-7\nFAKE LOG LINE"), "invalid_value"),
    (dict(user_id="x" * 300), "invalid_value"),
    (dict(session_start=session_event_pb2.SessionStart(token_budget=-1)), "invalid_value"),
    (dict(session_start=session_event_pb2.SessionStart(task_id="t\x00")), "invalid_value"),
    (dict(task_assigned=session_event_pb2.TaskAssigned(subagent_id="s", stage=-3)), "invalid_value"),
    (dict(subagent_finished=session_event_pb2.SubAgentFinished(subagent_id="s", steps=-1)), "invalid_value"),
    (dict(feedback=session_event_pb2.Feedback(value=1.0)), "invalid_value"),  # FEEDBACK_KIND_UNSPECIFIED
    (dict(feedback=session_event_pb2.Feedback(kind=session_event_pb2.FEEDBACK_KIND_THUMBS_UP, value=1e308)),
     "invalid_value"),
    (dict(tool_call=session_event_pb2.ToolCall(call_id="c\r1", name="edit")), "invalid_value"),
]


@pytest.mark.parametrize("fields, reason", HOSTILE_FIELDS)
def test_every_field_is_held_to_its_range_and_character_set(fields, reason):
    assert reason_of(good_event(**fields)) == reason


def test_in_range_values_still_pass():
    for fields in (dict(session_start=session_event_pb2.SessionStart(token_budget=8192, task_id="t 1")),
                   dict(task_assigned=session_event_pb2.TaskAssigned(subagent_id="s", stage=0)),
                   dict(feedback=session_event_pb2.Feedback(kind=session_event_pb2.FEEDBACK_KIND_THUMBS_DOWN,
                                                            value=-1.0)),
                   dict(user_id="dave é 7")):
        validate(good_event(**fields), "acme", NOW_MS, LIMITS)


def test_an_unknown_field_number_is_refused_at_any_depth():
    top = good_event().SerializeToString() + b"\xf8\x07\x01"  # field 127, varint
    assert reason_of(parse_binary(top)) == "unknown_field"
    event = good_event(tool_call=session_event_pb2.ToolCall(call_id="c", name="edit"))
    inner = session_event_pb2.ToolCall.FromString(event.tool_call.SerializeToString() + b"\xa0\x06\x05")
    event.tool_call.CopyFrom(inner)
    assert reason_of(event) == "unknown_field"
