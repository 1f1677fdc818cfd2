"""Redactor: masks findings in text and in every string of a protobuf message (see the package doc)."""

from __future__ import annotations

import secrets
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from liverl.config.redaction import DETECTORS, RedactionConfig
from liverl.privacy.pseudonyms import keyed_digest
from liverl.redaction.detectors import BUILTIN, TRIGGER, any_finding_pattern, compiled, compiled_bounded

# Join keys: serving's ModelCalls and the pipelines join on them, so a finding in one is replaced by a
# keyed hash of the whole value (under the tenant's key: the same in every stage) instead of a marker.
ID_FIELDS = frozenset({"event_id", "session_id", "tenant_id", "agent_id", "call_id", "request_id", "target_call_id",
                       "subagent_id", "task_id", "chunk_ids", "gold_chunk_ids", "answer_chunk_ids"})
Check = Callable[[str, str], bool] | None
Around = Callable[[str, int, int], bool] | None
IdPseudonym = Callable[[str, str], str]  # (finding kind, id) -> what is stored instead of the id


class Redactor:
    def __init__(self, config: RedactionConfig | None = None, tenant: str | None = None,
                 pseudonym: IdPseudonym | None = None):
        """pseudonym: the stand-in of an id that holds a finding. A tenant's records take its keyed pseudonym
        (liverl.privacy.tenant_redactor builds such a Redactor); the default, process_pseudonym, joins nothing
        beyond this process and is for text without a tenant (log lines); ids_as_given keeps ids unchanged."""
        config = config or RedactionConfig()
        override = config.tenants.get(tenant) if tenant is not None else None
        pick = lambda name: getattr(config, name) if override is None or getattr(override, name) is None \
            else getattr(override, name)  # noqa: E731 - tenant value if set, else the global one
        builtin = pick("builtin")
        unknown = set(builtin) - set(DETECTORS)
        if unknown:
            raise ValueError(f"unknown redaction detectors {sorted(unknown)}; choose from {DETECTORS}")
        self.enabled: bool = pick("enabled")
        self.max_field_chars: int = pick("max_field_chars")
        self.phone_region: str = pick("phone_region")
        self._pseudonym = pseudonym or process_pseudonym
        self._rules: list[tuple[str, object, Check, Around]] = [
            (d.name, compiled_bounded(d.pattern) if d.bounded else compiled(d.pattern), d.check, d.around)
            for name in DETECTORS if name in builtin for d in BUILTIN[name]]
        custom = {**config.custom_patterns, **(override.custom_patterns if override else {})}
        for name, pattern in custom.items():
            try:
                self._rules.append((name, compiled(pattern), None, None))
            except ValueError as error:
                raise ValueError(f"custom redaction pattern {name!r} is not a valid RE2 regex: {error}") from None
        self._has_custom = bool(custom)
        self._trigger = compiled(TRIGGER)
        # One scan standing for every built-in detector (see any_finding_pattern): most strings that pass
        # the trigger (ids full of digits, "line 42") hold no finding at all.
        self._any_finding = compiled(any_finding_pattern([name for name in DETECTORS if name in builtin]))

    # --- text ------------------------------------------------------------------------------------

    def redact_text(self, text: str, counts: Counter | None = None) -> str:
        """text with each finding replaced by "[REDACTED:<kind>]", cut to max_field_chars; counts += kinds."""
        if not self.enabled:
            return text
        counts = Counter() if counts is None else counts
        over = len(text) - self.max_field_chars
        if over > 0:
            text = text[:self.max_field_chars]
        text = self._detect(text, counts)
        if over > 0:
            counts["truncated"] += 1
            text += f"[TRUNCATED:{over} chars]"
        return text

    def redact_bytes(self, raw: bytes) -> tuple[bytes, Counter]:
        """Best effort over bytes that did not parse (dead-letter payloads): byte for byte via latin-1."""
        counts: Counter = Counter()
        if not self.enabled:
            return raw, counts
        return self.redact_text(raw.decode("latin-1"), counts).encode("latin-1", errors="replace"), counts

    def _detect(self, text: str, counts: Counter) -> str:
        """Findings masked. Text that is not in NFKC form (fullwidth digits, ligatures) is matched in that
        form, and returned in it only when something was found: look-alike characters hide nothing."""
        normal = _nfkc(text)
        if normal is text:
            return self._detect_normal(text, counts)
        found: Counter = Counter()
        redacted = self._detect_normal(normal, found)
        if not found:
            return text
        counts.update(found)
        return redacted

    def _detect_normal(self, text: str, counts: Counter) -> str:
        if not self._has_custom and not self._may_hold_finding(text):
            return text
        for name, pattern, check, around in self._rules:
            text = self._apply(name, pattern, check, around, text, counts)
        return text

    def _apply(self, name: str, pattern, check: Check, around: Around, text: str, counts: Counter) -> str:
        token = f"[REDACTED:{name}]"
        found = 0

        def replace(match) -> str:
            nonlocal found
            whole = match.group(0)
            if name == "env_secret":
                if match.group("value").startswith("[REDACTED"):
                    return whole
                found += 1
                return f"{match.group('name')}{match.group('sep')}{match.group('quote')}{token}"
            if name == "phone" and not _standalone(text, match.start(), match.end()):
                return whole
            # a pattern with a "value" group masks that group only (the words naming it stay)
            start, end = match.span("value") if "value" in match.re.groupindex else match.span()
            candidate = text[start:end]
            if check is not None and not check(candidate, self.phone_region):
                return whole
            if around is not None and not around(text, start, end):
                return whole
            found += 1
            return whole[:start - match.start()] + token + whole[end - match.start():]

        redacted = pattern.sub(replace, text)
        if found:
            counts[name] += found
        return redacted

    # --- messages --------------------------------------------------------------------------------

    def redact_message(self, message: Message) -> Counter:
        """Redact every string, repeated string, map key and map value in place (nested messages
        included), and drop unknown fields; returns the counts per kind."""
        counts: Counter = Counter()
        message.DiscardUnknownFields()
        if self.enabled and self._may_need_walk(message):
            self._walk(message, counts)
        return counts

    def none_can_change(self, messages: Sequence[Message]) -> bool:
        """True when redact_message would change none of these messages (one capture request's events):
        the prefilter of redact_message, one scan over all their strings instead of one per message. Their
        unknown fields are dropped either way. False means: redact each with redact_message."""
        for message in messages:
            message.DiscardUnknownFields()
        if not self.enabled:
            return True
        if self._has_custom:
            return False
        strings: list[str] = []
        for message in messages:
            _collect_strings(message, strings)
        return max(map(len, strings), default=0) <= self.max_field_chars and \
            self._any_finding.search(_nfkc("\n".join(strings))) is None

    def pseudonym(self, value: str, kind: str) -> str:
        """The stand-in for an id that held personal data: equal values give equal pseudonyms."""
        return self._pseudonym(kind, value)

    def _may_need_walk(self, message: Message) -> bool:
        """Whether any string of the message could change: every detector at once (one RE2 scan) over
        its strings, each on its own line (a line break is no token character, so each string keeps its
        own edges). Cheaper than the trigger, whose case-insensitive alternation is the slower scan."""
        if self._has_custom:
            return True
        strings: list[str] = []
        _collect_strings(message, strings)
        return max(map(len, strings), default=0) > self.max_field_chars or \
            self._any_finding.search(_nfkc("\n".join(strings))) is not None

    def _may_hold_finding(self, text: str) -> bool:
        """False only when no built-in detector can change text (custom patterns are not covered)."""
        return self._any_finding.search(text) is not None and self._trigger.search(text) is not None

    def redact_id(self, value: str, counts: Counter | None = None) -> str:
        """An id (a join key) as redact_message leaves it: unchanged, or the keyed pseudonym of the whole
        value when it holds a finding, so the same id of a tenant gets the same stand-in in every stage."""
        if not self.enabled:
            return value
        return self._redact_id(value, Counter() if counts is None else counts)

    def _redact_id(self, value: str, counts: Counter) -> str:
        found: Counter = Counter()
        self._detect(value, found)
        if not found:
            return value
        counts.update(found)
        return self.pseudonym(value, next(iter(found)))

    def _walk(self, message: Message, counts: Counter) -> None:
        for field, value in message.ListFields():
            kind = _field_kind(field)
            if kind == "id":
                if field.is_repeated:
                    value[:] = [self._redact_id(item, counts) for item in value]
                else:
                    setattr(message, field.name, self._redact_id(value, counts))
            elif kind == "string":
                redacted = self.redact_text(value, counts)
                if redacted != value:
                    setattr(message, field.name, redacted)
            elif kind == "strings":
                value[:] = [self.redact_text(item, counts) for item in value]
            elif kind == "message":
                self._walk(value, counts)
            elif kind == "messages":
                for item in value:
                    self._walk(item, counts)
            elif kind == "map":
                self._walk_map(field, value, counts)

    def _walk_map(self, field: FieldDescriptor, entries, counts: Counter) -> None:
        key_type = field.message_type.fields_by_name["key"].type
        value_type = field.message_type.fields_by_name["value"].type
        if value_type == FieldDescriptor.TYPE_MESSAGE:
            for key in entries:
                self._walk(entries[key], counts)
        elif value_type == FieldDescriptor.TYPE_STRING:
            for key in list(entries):
                entries[key] = self.redact_text(entries[key], counts)
        if key_type != FieldDescriptor.TYPE_STRING:
            return
        renamed = {key: self.redact_text(key, counts) for key in entries}
        if all(key == new for key, new in renamed.items()):
            return
        items = []
        for key, new in renamed.items():
            value = entries[key]
            if value_type == FieldDescriptor.TYPE_MESSAGE:
                copy = type(value)()
                copy.CopyFrom(value)
                value = copy
            items.append((new, value))
        entries.clear()
        for new, value in items:
            while new in entries:  # two keys redacted alike: keep both values
                new += "'"
            if value_type == FieldDescriptor.TYPE_MESSAGE:
                entries[new].CopyFrom(value)
            else:
                entries[new] = value


def process_pseudonym(kind: str, value: str) -> str:
    """"redacted-<kind>-<hex>" under a random key this process alone holds: nobody can test a guess, and no
    other process gives the same stand-in (fine for log lines, which never need to join)."""
    return f"redacted-{kind}-{keyed_digest(_process_key(), f'redacted-{kind}', value)}"


def ids_as_given(kind: str, value: str) -> str:
    """Ids kept unchanged (the SDK's spool): the capture service pseudonymises them with the tenant's key."""
    return value


@cache
def _process_key() -> bytes:
    return secrets.token_bytes(32)


def _collect_strings(message: Message, out: list[str]) -> None:
    """Every string the walk would look at (fields, repeated fields, map keys and values), in any order."""
    for field, value in message.ListFields():
        kind = _field_kind(field)
        if kind == "skip":
            continue
        if kind == "id" or kind == "string":
            if field.is_repeated:
                out.extend(value)
            else:
                out.append(value)
        elif kind == "strings":
            out.extend(value)
        elif kind == "message":
            _collect_strings(value, out)
        elif kind == "messages":
            for item in value:
                _collect_strings(item, out)
        else:  # a map
            entry = field.message_type
            if entry.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING:
                out.extend(value)
            value_type = entry.fields_by_name["value"].type
            if value_type == FieldDescriptor.TYPE_STRING:
                out.extend(value.values())
            elif value_type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    _collect_strings(item, out)


def _nfkc(text: str) -> str:
    """text in NFKC form (fullwidth digits and letters as ASCII, ...); text itself when it is already."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    return unicodedata.normalize("NFKC", text)


def _standalone(text: str, start: int, end: int) -> bool:
    """A phone candidate that is not part of a longer token (an id, a decimal, a version string)."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if before.isalnum() or before in "+_/.-" or after.isalnum() or after in "_/":
        return False
    return not (after in ".-" and end + 1 < len(text) and text[end + 1].isdigit())


@cache
def _field_kind(field: FieldDescriptor) -> str:
    """How to walk a field; cached per descriptor (reading descriptor options is slow)."""
    if field.type == FieldDescriptor.TYPE_STRING:
        if field.name in ID_FIELDS:
            return "id"
        return "strings" if field.is_repeated else "string"
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return "skip"
    if field.message_type.GetOptions().map_entry:
        return "map"
    return "messages" if field.is_repeated else "message"
