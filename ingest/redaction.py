"""Mask personal data and secrets in every string of an event before anything reaches Kafka.

Each match becomes "[REDACTED:<kind>]" and is counted per kind, so operators see what the product
leaks without seeing the data. Custom patterns come from config (ingest.redaction.custom_patterns).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# Applied in this order: the most specific first, so a JWT is not half-eaten by the token rules.
BUILTIN_PATTERNS: dict[str, str] = {
    "private_key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    "api_key": r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
               r"|gh[pousr]_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})",
    "bearer_token": r"(?i:\bbearer\s+)(?!\[REDACTED)[A-Za-z0-9._~+/=-]{8,}",
    # NAME=value / NAME: value where NAME says secret; the name stays, the value goes.
    "env_secret": r"\b(?P<name>(?i:[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIALS?"
                  r"|ACCESS_?KEY)[A-Z0-9_]*))(?P<sep>[\"']?\s*[=:]\s*)(?P<quote>[\"']?)(?!\[REDACTED)"
                  r"(?P<value>[^\s\"',;]+)",
    "email": r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
    "phone": r"(?<![\w+])(?:\+\d{1,3}[\s.-]?\d{1,4}(?:[\s.-]?\d{2,4}){2,3}|(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4})"
             r"(?![\w])",
}

# Join keys stay intact (serving's ModelCalls and the pipelines join on them); free text and user ids do not.
ID_FIELDS = frozenset({"event_id", "session_id", "tenant_id", "agent_id", "call_id", "request_id", "target_call_id",
                       "subagent_id", "task_id", "chunk_ids", "gold_chunk_ids", "answer_chunk_ids"})


# Cheap tests that must hold for a detector to match at all (text, lower-cased text): most strings
# fail them all, so the regular expressions run only where something may be there.
_PHONE_SHAPE = re.compile(r"\+\d|\(\d{3}\)|\d{3}[\s.-]\d")
_EMAIL_SHAPE = re.compile(r"[A-Za-z0-9._%+-]@[A-Za-z0-9-]")
_KEY_PREFIX = re.compile(r"sk[-_]|AKIA|xox|AIza|gh[pousr]_")
_SECRET_WORD = re.compile(r"secret|token|passw|key|credential")
TRIGGERS: dict[str, Callable[[str, str], bool]] = {
    "private_key": lambda text, lower: "-----begin" in lower,
    "jwt": lambda text, lower: "eyJ" in text,
    "api_key": lambda text, lower: _KEY_PREFIX.search(text) is not None,
    "bearer_token": lambda text, lower: "bearer" in lower,
    "env_secret": lambda text, lower: ("=" in text or ":" in text) and _SECRET_WORD.search(lower) is not None,
    "email": lambda text, lower: "@" in text and _EMAIL_SHAPE.search(text) is not None,
    "phone": lambda text, lower: _PHONE_SHAPE.search(text) is not None,
}


class Redactor:
    """Compiled detectors; `redact_event` rewrites a protobuf message in place and returns counts."""

    def __init__(self, builtin: Sequence[str] = tuple(BUILTIN_PATTERNS), custom: Mapping[str, str] | None = None,
                 enabled: bool = True):
        unknown = set(builtin) - set(BUILTIN_PATTERNS)
        if unknown:
            raise ValueError(f"unknown redaction patterns {sorted(unknown)}; choose from {sorted(BUILTIN_PATTERNS)}")
        self.enabled = enabled
        always = lambda text, lower: True  # noqa: E731 - custom patterns have no cheap pre-test
        self._rules: list[tuple[str, re.Pattern, Callable[[str, str], bool]]] = [
            (name, re.compile(BUILTIN_PATTERNS[name]), TRIGGERS[name]) for name in BUILTIN_PATTERNS if name in builtin]
        self._has_custom = bool(custom)
        for name, pattern in (custom or {}).items():
            try:
                self._rules.append((name, re.compile(pattern), always))
            except re.error as error:
                raise ValueError(f"custom redaction pattern {name!r} is not a valid regex: {error}") from error

    def redact_text(self, text: str, counts: Counter) -> str:
        lower = text.lower()
        for name, rule, may_match in self._rules:
            if may_match(text, lower):
                text, found = rule.subn(_replacement(name), text)
                if found:
                    counts[name] += found
                    lower = text.lower()
        return text

    def redact_event(self, message: Message) -> Counter:
        """Redact every string field (nested messages, repeated fields and map values) in place."""
        counts: Counter = Counter()
        if self.enabled and self._may_match_somewhere(message):
            _walk_strings(message, lambda text: self.redact_text(text, counts))
        return counts

    def _may_match_somewhere(self, message: Message) -> bool:
        """Run the cheap pre-tests once over the serialized event (every string lies in it, byte for
        byte): most events are clean and skip the field walk. Custom patterns always walk."""
        if self._has_custom:
            return True
        blob = message.SerializeToString().decode("latin-1")
        lower = blob.lower()
        return any(may_match(blob, lower) for _, _, may_match in self._rules)

    def redact_bytes(self, raw: bytes) -> tuple[bytes, Counter]:
        """Best effort over bytes that did not parse (dead-letter payloads): byte-for-byte via latin-1."""
        counts: Counter = Counter()
        if not self.enabled:
            return raw, counts
        return self.redact_text(raw.decode("latin-1"), counts).encode("latin-1", errors="replace"), counts


def _replacement(name: str) -> Callable[[re.Match], str]:
    token = f"[REDACTED:{name}]"
    if name == "env_secret":
        return lambda m: f"{m.group('name')}{m.group('sep')}{m.group('quote')}{token}"
    return lambda m: token


def _walk_strings(message: Message, rewrite: Callable[[str], str]) -> None:
    for field, value in message.ListFields():
        kind = _field_kind(field)
        if kind == "skip":
            continue
        if kind == "string":
            redacted = rewrite(value)
            if redacted is not value:
                setattr(message, field.name, redacted)
        elif kind == "strings":
            value[:] = [rewrite(item) for item in value]
        elif kind == "message":
            _walk_strings(value, rewrite)
        elif kind == "messages":
            for item in value:
                _walk_strings(item, rewrite)
        elif kind == "string_map":
            for key in list(value):
                value[key] = rewrite(value[key])
        elif kind == "message_map":
            for key in list(value):
                _walk_strings(value[key], rewrite)


@cache
def _field_kind(field: FieldDescriptor) -> str:
    """How to walk a field; cached per descriptor (reading descriptor options is slow)."""
    if field.name in ID_FIELDS:
        return "skip"
    if field.type == FieldDescriptor.TYPE_STRING:
        return "strings" if field.is_repeated else "string"
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return "skip"
    if field.message_type.GetOptions().map_entry:
        value_type = field.message_type.fields_by_name["value"].type
        return {FieldDescriptor.TYPE_STRING: "string_map", FieldDescriptor.TYPE_MESSAGE: "message_map"}.get(
            value_type, "skip")
    return "messages" if field.is_repeated else "message"
