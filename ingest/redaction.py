"""Mask personal data and secrets in every string of an event before anything reaches Kafka.

Each match becomes "[REDACTED:<kind>]" and is counted per kind, so operators see what the product
leaks without seeing the data. Custom patterns come from config (ingest.redaction.custom_patterns).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

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


class Redactor:
    """Compiled detectors; `redact_event` rewrites a protobuf message in place and returns counts."""

    def __init__(self, builtin: Sequence[str] = tuple(BUILTIN_PATTERNS), custom: Mapping[str, str] | None = None,
                 enabled: bool = True):
        unknown = set(builtin) - set(BUILTIN_PATTERNS)
        if unknown:
            raise ValueError(f"unknown redaction patterns {sorted(unknown)}; choose from {sorted(BUILTIN_PATTERNS)}")
        self.enabled = enabled
        self._rules: list[tuple[str, re.Pattern]] = [(name, re.compile(BUILTIN_PATTERNS[name])) for name in
                                                     BUILTIN_PATTERNS if name in builtin]
        for name, pattern in (custom or {}).items():
            try:
                self._rules.append((name, re.compile(pattern)))
            except re.error as error:
                raise ValueError(f"custom redaction pattern {name!r} is not a valid regex: {error}") from error
        # One pass finds most strings clean; the detectors run one by one only on a hit.
        try:
            self._any = re.compile("|".join(f"(?:{rule.pattern})" for _, rule in self._rules)) if self._rules else None
        except re.error:  # a custom pattern with global flags cannot be combined: check every detector
            self._any = re.compile("")

    def redact_text(self, text: str, counts: Counter) -> str:
        if self._any is None or not self._any.search(text):
            return text
        for name, rule in self._rules:
            text, found = rule.subn(_replacement(name), text)
            if found:
                counts[name] += found
        return text

    def redact_event(self, message: Message) -> Counter:
        """Redact every string field (nested messages, repeated fields and map values) in place."""
        counts: Counter = Counter()
        if self.enabled:
            _walk_strings(message, lambda text: self.redact_text(text, counts))
        return counts

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
        if field.name in ID_FIELDS:
            continue
        repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_STRING:
            if repeated:
                value[:] = [rewrite(item) for item in value]
            else:
                setattr(message, field.name, rewrite(value))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type == FieldDescriptor.TYPE_STRING:
                    for key in list(value):
                        value[key] = rewrite(value[key])
                elif value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    for key in list(value):
                        _walk_strings(value[key], rewrite)
            elif repeated:
                for item in value:
                    _walk_strings(item, rewrite)
            else:
                _walk_strings(value, rewrite)
