"""Redacting whole protobuf messages: every string, map key and value, ids by pseudonym, unknown fields
dropped, long fields cut; per-tenant settings; RE2 custom patterns."""

from __future__ import annotations

import unicodedata
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liverl.config.redaction import RedactionConfig, TenantRedaction
from liverl.redaction import Redactor
from liverl.v1 import session_event_pb2


def test_every_string_map_key_and_value_is_redacted():
    event = session_event_pb2.SessionEvent(user_id="u@x.com")
    event.session_start.attributes["env"] = "SECRET_TOKEN=abc"
    event.session_start.attributes["bob@example.com"] = "owner"
    event.session_start.task_family = "card 4111 1111 1111 1111"
    counts = Redactor().redact_message(event)
    assert event.user_id == "[REDACTED:email]"
    assert dict(event.session_start.attributes) == {"env": "SECRET_TOKEN=[REDACTED:env_secret]",
                                                    "[REDACTED:email]": "owner"}
    assert event.session_start.task_family == "card [REDACTED:card]"
    assert counts == Counter({"email": 2, "env_secret": 1, "card": 1})


def test_id_fields_get_a_stable_pseudonym_so_joins_still_work():
    a = session_event_pb2.SessionEvent(event_id="e1", session_id="bob@example.com")
    b = session_event_pb2.SessionEvent(event_id="e2", session_id="bob@example.com")
    a.tool_result.chunk_ids.extend(["c1", "call 4155550134"])
    redactor = Redactor()
    assert redactor.redact_message(a) == Counter({"email": 1, "phone": 1})
    redactor.redact_message(b)
    assert a.session_id == b.session_id and a.session_id.startswith("redacted-email-")
    assert "example" not in a.session_id and a.event_id == "e1"
    assert a.tool_result.chunk_ids[0] == "c1" and a.tool_result.chunk_ids[1].startswith("redacted-phone-")


def test_unknown_fields_are_dropped_and_long_fields_cut():
    event = session_event_pb2.SessionEvent(event_id="e1")
    event.user_message.text = "x" * 100
    raw = event.SerializeToString() + b"\xfa\x07\x0fbob@example.com"  # field 127, unknown to SessionEvent
    parsed = session_event_pb2.SessionEvent.FromString(raw)
    counts = Redactor(RedactionConfig(max_field_chars=10)).redact_message(parsed)
    assert b"example" not in parsed.SerializeToString()
    assert parsed.user_message.text == "x" * 10 + "[TRUNCATED:90 chars]" and counts["truncated"] == 1


def test_tenant_overrides_and_custom_patterns():
    config = RedactionConfig(custom_patterns={"ticket": r"TICKET-\d+"},
                             tenants={"quiet": TenantRedaction(enabled=False),
                                      "strict": TenantRedaction(custom_patterns={"project": r"\bPRJ-[A-Z]+\b"})})
    assert Redactor(config).redact_text("see TICKET-42") == "see [REDACTED:ticket]"
    assert Redactor(config, "quiet").redact_text("bob@example.com TICKET-1") == "bob@example.com TICKET-1"
    assert Redactor(config, "strict").redact_text("PRJ-X TICKET-1") == "[REDACTED:project] [REDACTED:ticket]"
    event = session_event_pb2.SessionEvent()
    event.user_message.text = "bob@example.com"
    assert not Redactor(config, "quiet").redact_message(event) and event.user_message.text == "bob@example.com"


def test_bad_config_says_what_to_fix():
    with pytest.raises(ValueError, match="unknown redaction detectors"):
        Redactor(RedactionConfig(builtin=["nope"]))
    with pytest.raises(ValueError, match="not a valid RE2 regex"):
        Redactor(RedactionConfig(custom_patterns={"bad": "("}))
    with pytest.raises(ValueError, match="lookaround"):
        Redactor(RedactionConfig(custom_patterns={"slow": r"(?<=a)b"}))


def test_bytes_that_did_not_parse_are_redacted_byte_for_byte():
    blob, counts = Redactor().redact_bytes(b"\xff\x00 mail bob@example.com \xfe")
    assert blob == b"\xff\x00 mail [REDACTED:email] \xfe" and counts == Counter({"email": 1})


# The prefilter (one scan for every detector) must never change a result: compared with the detectors
# applied one by one on the same text, on text dense in what the detectors look for.
FINDING_PIECES = ["4155550134", "+1 415 555 0134", "(415) 555-0134", "4111 1111 1111 1111", "GB82 WEST 1234 5698 7654 32",
                  "536-22-1234", "12345678Z", "111.444.777-35", "bob@example.com", "DB_PASSWORD=x", "Bearer abcdefgh1",
                  "sk-abcdefghijklmnop1234", "AKIAIOSFODNN7EXAMPLE", "3f786850e387550fdab836", "123456", "v1.2.3456789",
                  "a", "Z", "_", "/", ".", "-", "+", " ", "\n", "é", "٣", "ſecret=1", "line 42", "[REDACTED:email]",
                  "４１１１１１１１１１１１１１１１", "dave%40example.com", "ssn 536221234",
                  "gb82west12345698765432",
                  "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "3f786850e387550fdab836ed7e6dc881de23001b"]


def _one_by_one(redactor: Redactor, text: str) -> tuple[str, Counter]:
    """Every detector on the text's NFKC form, which is kept only when something was found."""
    counts: Counter = Counter()
    normal = unicodedata.normalize("NFKC", text)
    if redactor._trigger.search(normal):
        for name, pattern, check, around in redactor._rules:
            normal = redactor._apply(name, pattern, check, around, normal, counts)
    return (normal if counts else text), counts


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FINDING_PIECES) | st.text(alphabet="0123456789 -.+()/_abcXYZ@", max_size=12),
                max_size=8))
def test_the_prefilter_never_changes_what_is_redacted(pieces):
    redactor = Redactor()
    text = "".join(pieces)
    counts: Counter = Counter()
    assert (redactor._detect(text, counts), counts) == _one_by_one(redactor, text)
    event = session_event_pb2.SessionEvent(event_id=text, session_id="s" + text)
    event.tool_call.arguments_json = text[::-1]
    event.session_start.attributes[text] = text
    slow = session_event_pb2.SessionEvent()
    slow.CopyFrom(event)
    slow_counts: Counter = Counter()
    redactor._walk(slow, slow_counts)  # what redact_message does when it walks every string
    assert redactor.redact_message(event) == slow_counts and event == slow


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(FINDING_PIECES) | st.text(alphabet="0123456789 -.+()/_abcXYZ@", max_size=12),
                         max_size=4), min_size=1, max_size=6))
def test_one_scan_for_a_request_says_clean_only_when_no_event_would_change(events_pieces):
    redactor = Redactor()
    events = []
    for pieces in events_pieces:
        text = "".join(pieces)
        event = session_event_pb2.SessionEvent(event_id="e" + text, session_id="s1")
        event.user_message.text = text[::-1]
        events.append(event)
    walked = []
    for event in events:  # what each event becomes when walked on its own
        slow = session_event_pb2.SessionEvent()
        slow.CopyFrom(event)
        slow_counts: Counter = Counter()
        redactor._walk(slow, slow_counts)
        walked.append((slow, slow_counts))
    if redactor.none_can_change(events):
        assert all(not counts and slow == event for event, (slow, counts) in zip(events, walked))
    else:  # the caller then redacts each event on its own: exactly what a walk gives
        for event, (slow, counts) in zip(events, walked):
            assert redactor.redact_message(event) == counts and event == slow


def test_one_scan_for_a_request_drops_unknown_fields_and_sees_long_fields_and_custom_patterns():
    clean = session_event_pb2.SessionEvent(event_id="e1", session_id="s1")
    clean.user_message.text = "fix the failing test"
    raw = session_event_pb2.SessionEvent(event_id="e2").SerializeToString() + b"\xf8\x7f\x01"  # field 2047: unknown
    unknown = session_event_pb2.SessionEvent.FromString(raw)
    assert len(unknown.SerializeToString()) == len(raw)
    assert Redactor().none_can_change([clean, unknown])
    assert unknown.SerializeToString() == session_event_pb2.SessionEvent(event_id="e2").SerializeToString()
    long = session_event_pb2.SessionEvent(event_id="e3")
    long.user_message.text = "x" * 20
    assert not Redactor(RedactionConfig(max_field_chars=10)).none_can_change([clean, long])
    finding = session_event_pb2.SessionEvent(event_id="e4")
    finding.tool_result.output = "mail bob@example.com"
    assert not Redactor().none_can_change([clean, finding])
    custom = Redactor(RedactionConfig(custom_patterns={"ticket": r"TICKET-\d+"}))
    assert not custom.none_can_change([clean])  # custom patterns have no prefilter: always walked
    assert Redactor(RedactionConfig(enabled=False)).none_can_change([finding])


def test_hex_ids_and_line_numbers_skip_the_detectors():
    redactor = Redactor()
    assert not redactor._may_hold_finding("3f786850e387550f1234567dab836ed7") and not redactor._may_hold_finding("line 42")
    assert redactor._may_hold_finding("call 4155550134")
    # a commit id is 40 characters like an AWS secret key: it must not make every coding event walk
    assert not redactor._may_hold_finding("commit 3f786850e387550fdab836ed7e6dc881de23001b merged")
