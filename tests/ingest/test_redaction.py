"""Redaction of personal data and secrets, with counts per detector."""

from __future__ import annotations

from collections import Counter

import pytest

from ingest.redaction import Redactor
from liverl.v1 import session_event_pb2


@pytest.mark.parametrize("text, kind", [
    ("write to bob.smith@example.co.uk today", "email"),
    ("call +1 415 555 0134 now", "phone"),
    ("call (415) 555-0134 now", "phone"),
    ("key sk-proj-abcdefghijklmnopqrstuvwx", "api_key"),
    ("aws AKIAIOSFODNN7EXAMPLE", "api_key"),
    ("Authorization: Bearer abc.def-ghi_123456", "bearer_token"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
    ("DB_PASSWORD=hunter2", "env_secret"),
    ('export GITHUB_TOKEN="abc123"', "env_secret"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "private_key"),
])
def test_builtin_detectors(text, kind):
    counts = Counter()
    out = Redactor().redact_text(text, counts)
    assert f"[REDACTED:{kind}]" in out and counts[kind] == 1, out


def test_ordinary_text_is_left_alone():
    text = "version 1.2.3 on 2024-01-02, 12345 tokens, file a.py line 42"
    assert Redactor().redact_text(text, Counter()) == text


def test_env_secret_keeps_the_name_and_drops_the_value():
    out = Redactor().redact_text("API_KEY=xyz123 HOME=/root", Counter())
    assert out == "API_KEY=[REDACTED:env_secret] HOME=/root"


def test_every_string_in_an_event_is_redacted_but_join_keys_are_not():
    event = session_event_pb2.SessionEvent(event_id="a@b.cc", session_id="s@x.com", user_id="u@x.com")
    event.session_start.attributes["env"] = "SECRET_TOKEN=abc"
    event.session_start.task_id = "t@x.com"
    counts = Redactor(custom={"ticket": r"TICKET-\d+"}).redact_event(event)
    assert event.session_id == "s@x.com" and event.event_id == "a@b.cc" and event.session_start.task_id == "t@x.com"
    assert event.user_id == "[REDACTED:email]"
    assert event.session_start.attributes["env"] == "SECRET_TOKEN=[REDACTED:env_secret]"
    assert counts == Counter({"email": 1, "env_secret": 1})
    tool = session_event_pb2.SessionEvent()
    tool.tool_result.output = "see TICKET-42"
    Redactor(custom={"ticket": r"TICKET-\d+"}).redact_event(tool)
    assert tool.tool_result.output == "see [REDACTED:ticket]"


def test_disabled_and_bad_config():
    event = session_event_pb2.SessionEvent()
    event.user_message.text = "bob@example.com"
    assert not Redactor(enabled=False).redact_event(event) and event.user_message.text == "bob@example.com"
    with pytest.raises(ValueError, match="unknown redaction"):
        Redactor(builtin=["nope"])
    with pytest.raises(ValueError, match="not a valid regex"):
        Redactor(custom={"bad": "("})
