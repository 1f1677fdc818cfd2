"""Sessions stitched without headers: a call that resends an earlier call's conversation and reply continues
that call's session (serving.recording.session_ids, rule 6).

Agent frameworks resend the whole conversation on every call and send no liverl header. Without stitching
each call would be a one-call session: a three-turn tool-using run would land as three unrelated sessions,
its tool results linked to nothing, and an outcome or feedback would reach one of them only. With it, every
finished chat or Responses call is remembered under a digest of its conversation followed by its reply; a
later call of the same tenant (and end user, when one is named) whose input begins with that conversation
continues its session, so the recorder writes one session and the distiller builds one trajectory.

The digest chains the canonical form of each message: its role, its text as the template renders it (a
list of text parts is already joined by the schema), its tool calls (id, name, arguments as canonical JSON)
and the tool call it answers. Key order in the JSON and string-or-parts content make no difference; the
digest is keyed with a secret of this process, so no one can aim a collision at another conversation.

What an attacker cannot do:
- join another tenant's session: entries are kept per tenant (serving.recording.tenant_lru) and the tenant seeds the
  digest; another tenant's conversation reads as unknown;
- grow memory: at most max_per_tenant entries per tenant and max_entries in all, the least recently used
  evicted first, each about half a kilobyte (ids and a digest; of the text only a tool call's name and
  capped arguments, below), in each of the two maps (conversations, and tool calls by id);
- choose which of two sessions a call joins: the longest stored prefix wins; one conversation and reply
  remembered for two different sessions (two users who said the same thing and got the same greedy answer)
  is ambiguous, and a call continuing it starts a session of its own rather than guess.

Tool calls sent back as text. Some frameworks (smolagents) do not resend a reply's tool calls as `tool_calls` but
as assistant text that quotes them ("Calling tools:\n[{'id': 'call_...', ...}]") and the results as a user message
("Observation:\n..."), and may change the conversation before it (smolagents' last "final answer" call has a system
prompt of its own). Every tool call id serving hands out is random and unguessable (serving.http.chat makes them,
TOOL_CALL_ID matches them) and reaches only the client that made the call, so an assistant message of the same
tenant and end user quoting one continues that call's session, whatever precedes it. For this, each tool call of a
reply is also remembered under its id, with its name and arguments (capped at ECHO_ARGUMENTS_CHARS: the only text
kept, for the tool link it makes). The message after the quoting one is the result of a lone quoted call;
several calls quoted together are linked without results (which part of a joint observation answers which call
cannot be told).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from liverl.contracts import names
from liverl.v1 import session_event_pb2
from serving.recording.tenant_lru import TenantLru

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from liverl.config.serving import ServingConfig

DIGEST_BYTES = 16
AMBIGUOUS = ""  # an entry's session_id when two sessions left the same conversation: never stitched to
TOOL_CALL_ID = re.compile(r"call_[0-9a-f]{24}")  # the ids serving.http.chat.parse_tool_calls gives tool calls
ECHO_ARGUMENTS_CHARS = 2048  # a quoted call's arguments kept for its link; longer ones are linked without them


@dataclass(frozen=True, slots=True)
class Remembered:
    """A finished call as a later call continues it: its session and its request id (the recorded ModelCall
    that made the reply, which a tool call of the reply is linked to)."""

    session_id: str  # AMBIGUOUS: two sessions left this same conversation
    request_id: str
    stored_at: float  # the stitcher's clock
    key_version: object = None  # the tenant's pseudonym key when remembered: an erasure replaces it
    echoed_call: tuple[str, str, str] | None = None  # (id, name, arguments): an entry for one tool call quoted as text


@dataclass(frozen=True, slots=True)
class ToolLink:
    """A tool result of the continuing call and the tool call of the earlier reply it answers."""

    call_id: str
    name: str
    arguments: str
    output: str | None  # None: the call is linked, its result is not known


@dataclass(frozen=True, slots=True)
class Stitch:
    """The session a call continues: the remembered call, how many of the call's messages it covers, and the
    tool results after them that answer the remembered reply's tool calls."""

    session_id: str
    request_id: str
    prefix_messages: int
    links: tuple[ToolLink, ...] = ()


@dataclass
class Conversation:
    """One call's input as the stitcher sees it: the digest after each message (chain[k - 1] covers the first
    k), computed once per call, then extended by the reply when the call is remembered."""

    tenant: str
    messages: Sequence[dict[str, Any]]
    chain: list[bytes] = field(default_factory=list)
    stitch: Stitch | None = None  # the session it continues, once found
    running: Any = None  # the keyed hash after the last message (hashlib's blake2b), extended by the reply
    scope: bytes = b""  # the keyed digest of (tenant, end user) alone: what a quoted tool call id is kept under


class Stitcher:
    def __init__(self, max_per_tenant: int, max_entries: int, ttl_s: float,
                 registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.monotonic):
        self.entries: TenantLru[Remembered] = TenantLru(max_entries, max_per_tenant, ttl_s, clock)
        # Each tool call of a reply, by its id (for a client that quotes it back as text): a map of its own, with
        # the same bounds, so that an agent's tool calls never evict the conversations they belong to.
        self.quoted: TenantLru[Remembered] = TenantLru(max_entries, max_per_tenant, ttl_s, clock)
        self._secret = secrets.token_bytes(32)  # digests are this process's: no collision can be precomputed
        self._outcomes = None
        if registry is not None:  # registered here, as the recorder's own counters, beside ServingMetrics'
            from prometheus_client import Counter

            self._outcomes = Counter("liverl_serving_stitched_calls", "Header-less chat and Responses calls by "
                                     "how their session was found: stitched, new, ambiguous.", ["outcome"],
                                     registry=registry)

    @classmethod
    def from_config(cls, config: ServingConfig, registry: CollectorRegistry | None = None) -> Stitcher | None:
        """The stitcher serving.stitch_* describe; None when stitching is off."""
        if not config.stitch_sessions:
            return None
        return cls(config.stitch_max_per_tenant, config.stitch_max_entries, config.stitch_ttl_s, registry)

    @property
    def clock(self) -> Callable[[], float]:
        return self.entries.clock

    def conversation(self, tenant: str, user: str, messages: Sequence[dict[str, Any]]) -> Conversation:
        """The digests of a call's input. user: the end user the call names ("" when none): a conversation is
        only continued for the same tenant and user."""
        running = hashlib.blake2b(orjson.dumps([tenant, user]), digest_size=DIGEST_BYTES, key=self._secret)
        scope = running.copy().digest()
        chain = []
        for message in messages:  # canonical forms are JSON arrays: concatenated, they still read one way only
            running.update(canonical(message))
            chain.append(running.copy().digest())
        return Conversation(tenant, messages, chain, running=running, scope=scope)

    def find(self, conversation: Conversation, erased: Callable[[Remembered], bool] | None = None
             ) -> Stitch | None:
        """The session the call continues: the longest prefix of its input remembered (and live) for its tenant,
        ending with the remembered reply or with an assistant message quoting its tool calls; None when there is
        none, or the longest is ambiguous or was erased since (erased(remembered))."""
        messages = conversation.messages
        for length in range(len(conversation.chain), 0, -1):
            if messages[length - 1].get("role") != "assistant":
                continue  # what is remembered always ends with a reply: no lookup elsewhere
            remembered = self.entries.get(conversation.tenant, conversation.chain[length - 1])
            echoed = () if remembered is not None else self._echoed(conversation, length)
            if remembered is None and not echoed:
                continue
            if echoed:
                sessions = {(entry.session_id, entry.request_id) for entry in echoed}
                remembered = echoed[0] if len(sessions) == 1 else Remembered(AMBIGUOUS, "", 0.0)
            if remembered.session_id == AMBIGUOUS or (erased is not None and erased(remembered)):
                self._count("ambiguous" if remembered.session_id == AMBIGUOUS else "new")
                return None
            self._count("stitched")
            links = echo_links(messages, length, [e.echoed_call for e in echoed]) if echoed \
                else tool_links(messages, length)
            return Stitch(remembered.session_id, remembered.request_id, length, tuple(links))
        self._count("new")
        return None

    def _echoed(self, conversation: Conversation, length: int) -> list[Remembered]:
        """The remembered tool calls (of the call's tenant and end user) that the assistant message at length - 1
        quotes as text."""
        content = conversation.messages[length - 1].get("content")
        if not isinstance(content, str) or "call_" not in content:
            return []
        found = []
        for call_id in dict.fromkeys(TOOL_CALL_ID.findall(content)):
            entry = self.quoted.get(conversation.tenant, self._echo_key(conversation.scope, call_id))
            if entry is not None:
                found.append(entry)
        return found

    def _echo_key(self, scope: bytes, call_id: str) -> bytes:
        return hashlib.blake2b(scope + b"\x00echo\x00" + call_id.encode(), digest_size=DIGEST_BYTES,
                               key=self._secret).digest()

    def remember(self, conversation: Conversation, reply: dict[str, Any], session_id: str, request_id: str,
                 key_version: object = None) -> None:
        """Remember a finished call: its input and its reply (the assistant message a client sends back), and
        each tool call of the reply under its id, for a client that sends the calls back as text."""
        running = conversation.running.copy()
        running.update(canonical(reply))
        self._put(self.entries, conversation.tenant, running.digest(), session_id, request_id, key_version)
        for call in reply.get("tool_calls") or ():
            call_id, function = call.get("id") or "", call.get("function") or {}
            if not TOOL_CALL_ID.fullmatch(call_id):
                continue  # not an id this server gave: a client could not be quoting it
            arguments = canonical_arguments(function.get("arguments"))
            echoed = (call_id, function.get("name") or "", arguments if len(arguments) <= ECHO_ARGUMENTS_CHARS else "")
            self._put(self.quoted, conversation.tenant, self._echo_key(conversation.scope, call_id), session_id,
                      request_id, key_version, echoed)

    def _put(self, entries: TenantLru[Remembered], tenant: str, key: bytes, session_id: str, request_id: str,
             key_version: object, echoed_call: tuple[str, str, str] | None = None) -> None:
        earlier = entries.peek(tenant, key)
        if earlier is not None and earlier.session_id != session_id and \
                self.clock() - earlier.stored_at <= entries.ttl_s:
            session_id = AMBIGUOUS  # the same conversation left by two sessions: continuing it names neither
        entries.put(tenant, key, Remembered(session_id, request_id, self.clock(), key_version, echoed_call))

    def _count(self, outcome: str) -> None:
        if self._outcomes is not None:
            self._outcomes.labels(outcome).inc()


def link_events(stitch: Stitch, tenant: str, session_id: str, agent_role: int, agent_id: str,
                at_ms: int) -> list[session_event_pb2.SessionEvent]:
    """The SessionEvents that record a stitched call's tool links: per link, the ToolCall (made by the remembered
    call's ModelCall, its request_id) and the ToolResult answering it, as the SDK's session.tool_call and
    tool_result record them. Event ids are derived from the link, so a retried call's events dedupe downstream.
    No user id: like a ModelCall, an event is linked to its user through the session (serving.recording.subjects)."""
    events = []
    for link in stitch.links:
        for sequence, body in enumerate(("tool_call", "tool_result") if link.output is not None else ("tool_call",)):
            event = session_event_pb2.SessionEvent(
                event_id=hashlib.sha256(orjson.dumps([tenant, session_id, stitch.request_id, link.call_id, body])
                                        ).hexdigest()[:32],
                session_id=session_id, tenant_id=tenant, schema_version=names.EVENT_SCHEMA_VERSION,
                event_time_ms=at_ms, agent_role=agent_role, agent_id=agent_id or "main", sequence=sequence)
            if body == "tool_call":
                event.tool_call.CopyFrom(session_event_pb2.ToolCall(call_id=link.call_id, name=link.name,
                                                                    arguments_json=link.arguments,
                                                                    request_id=stitch.request_id, valid=True))
            else:
                event.tool_result.CopyFrom(session_event_pb2.ToolResult(call_id=link.call_id, output=link.output))
            events.append(event)
    return events


def canonical(message: dict[str, Any]) -> bytes:
    """A message as the digest reads it: role, text, tool calls (id, name, canonical arguments) and the tool call
    it answers; no content and "" alike (an assistant message that only calls tools is sent back either way)."""
    calls = message.get("tool_calls")
    if calls:
        calls = [[call.get("id") or "", (call.get("function") or {}).get("name") or "",
                  canonical_arguments((call.get("function") or {}).get("arguments"))] for call in calls]
    return orjson.dumps([message.get("role") or "", message.get("content") or "", calls or (),
                         message.get("tool_call_id") or ""])


def canonical_arguments(arguments: object) -> str:
    """A tool call's arguments as compact JSON with sorted keys, so a framework that re-serialises them still
    matches; text that is not JSON as it is."""
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        return orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, TypeError):
        return arguments if isinstance(arguments, str) else str(arguments)


def tool_links(messages: Sequence[dict[str, Any]], prefix_messages: int) -> Iterable[ToolLink]:
    """The tool results after the first prefix_messages messages that answer a tool call of the last of them
    (the remembered reply). A tool message naming no call of that reply links to nothing."""
    if prefix_messages == 0:
        return
    reply = messages[prefix_messages - 1]
    asked = {call.get("id"): call.get("function") or {} for call in reply.get("tool_calls") or () if call.get("id")}
    for message in messages[prefix_messages:]:
        if message.get("role") != "tool":
            if message.get("role") == "assistant":
                return  # a later reply: what follows answers it, not the remembered one
            continue
        function = asked.pop(message.get("tool_call_id"), None)  # each call answered once
        if function is not None:
            yield ToolLink(message["tool_call_id"], function.get("name") or "", function.get("arguments") or "",
                           message.get("content") or "")


def echo_links(messages: Sequence[dict[str, Any]], prefix_messages: int,
               calls: Sequence[tuple[str, str, str]]) -> Iterable[ToolLink]:
    """The links of tool calls quoted as text in message prefix_messages - 1: each call, and as the result of a lone
    call the next message that is not an assistant's (a user "Observation:" or a tool message)."""
    result = None
    following = messages[prefix_messages] if len(messages) > prefix_messages else None
    if len(calls) == 1 and following is not None and following.get("role") != "assistant":
        result = following.get("content") or ""
    for call_id, name, arguments in calls:
        yield ToolLink(call_id, name, arguments, result)
