"""A corpus of real-looking findings that must be masked and look-alikes that must be left alone."""

from __future__ import annotations

from collections import Counter

import pytest

from liverl.redaction import Redactor

POSITIVES = [
    ("write to bob.smith@example.co.uk today", "email"),
    ("call +1 415 555 0134 now", "phone"),
    ("call (415) 555-0134 now", "phone"),
    ("ring me on 4155550134 please", "phone"),
    ("uk office +442079460958", "phone"),
    ("paid with 4111 1111 1111 1111 yesterday", "card"),
    ("card 5500-0000-0000-0004 declined", "card"),
    ("amex 378282246310005", "card"),
    ("wire to GB82 WEST 1234 5698 7654 32 by friday", "iban"),
    ("iban DE89370400440532013000", "iban"),
    ("ssn 536-22-1234 on file", "national_id"),
    ("DNI 12345678Z", "national_id"),
    ("CPF 111.444.777-35", "national_id"),
    ("aadhaar 2345 6789 0124", "national_id"),
    ("codice RSSMRA85T10A562S", "national_id"),
    ("key sk-proj-abcdefghijklmnopqrstuvwx", "api_key"),
    ("aws AKIAIOSFODNN7EXAMPLE", "api_key"),
    ("Authorization: Bearer abc.def-ghi_123456", "bearer_token"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
    ("DB_PASSWORD=hunter2", "env_secret"),
    ('export GITHUB_TOKEN="abc123"', "env_secret"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "private_key"),
    # Misses found by attack: each written as people and loggers do.
    ("SSN: 536221234 on file", "national_id"),
    ("ssn 536 22 1234 on file", "national_id"),
    ("iban gb82 west 1234 5698 7654 32 please", "iban"),
    ("iban de89370400440532013000", "iban"),
    ("GET /users?mail=dave%40example.com HTTP/1.1", "email"),
    ("paid with ４１１１ １１１１ １１１１ １１１１ (fullwidth)", "card"),
    ("ref card4111111111111111x", "card"),
    ("aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "api_key"),
    ("found Zx8vKq2LmN4pRt7wYb1cDf5gHj3kMn6pQr9sTu0v in the log", "api_key"),
    ("my ssn is 536221234, thanks", "national_id"),
    ("Social Security number: 536221234", "national_id"),
    ("SSN was 536 22 1234 before", "national_id"),
]

NEGATIVES = [
    "card-like but Luhn-invalid 4111 1111 1111 1112",
    "sixteen digits 1234567812345679 that fail Luhn",
    "order id ORD-2024-000042 shipped",
    "order #A7731-99 and invoice INV-2024-0042-7781",
    "version 1.2.3, v2.10.4-rc1, build 10.15.7.1234",
    "timestamp 1700000000000 ms, 1700000000 s, 2024-01-15T12:30:45Z",
    "date 2024-01-02 12:30, 12345 tokens, file a.py line 42",
    "sha 3f786850e387550fdab836ed7e6dc881de23001b",
    "ip 192.168.100.200 port 8080",
    "not an iban GB00 WEST 1234 5698 7654 32",
    "not an ssn 000-12-3456 nor 666-12-3456",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "price 1,234,567.89 USD",
    "order 123456789 shipped, ticket 536221234",
    "digest ab4111111111111111cdef0123456789abcdef00",
    "class ThisIsAVeryLongCamelCaseIdentifierName12 here",
    "path src/components/button/Button2Component.t",
    "base64 of zeros AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ １２３ stays as written",
]


@pytest.mark.parametrize("text, kind", POSITIVES)
def test_each_positive_is_masked_and_counted(text, kind):
    counts = Counter()
    out = Redactor().redact_text(text, counts)
    assert f"[REDACTED:{kind}]" in out and counts[kind] == 1, (out, counts)


@pytest.mark.parametrize("text", NEGATIVES)
def test_look_alikes_are_left_alone(text):
    counts = Counter()
    assert Redactor().redact_text(text, counts) == text, counts
    assert not counts


def test_env_secret_keeps_the_name_and_drops_the_value():
    assert Redactor().redact_text("API_KEY=xyz123 HOME=/root") == "API_KEY=[REDACTED:env_secret] HOME=/root"


def test_redacting_twice_changes_nothing_more():
    once = Redactor().redact_text(" ".join(text for text, _ in POSITIVES))
    counts = Counter()
    assert Redactor().redact_text(once, counts) == once and not counts
