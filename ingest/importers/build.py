"""ImportedSession -> the SessionEvents and ModelCalls the capture path would have produced.

Order of work: redact every text first, then render and tokenize the redacted text, so the token ids
never hold what redaction removed; then each message passes the redactor once more as a whole (ids
that hold personal data become the same keyed pseudonyms every stage uses).

An imported ModelCall is off-policy: no behaviour logprobs (completion_logprobs stays empty),
policy_version "import", origin "import:<format>". Its token ids are the policy tokenizer's reading
of the source's text, so the pipelines can still build a trajectory from it.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field

from ingest.importers.chat import completion_text, render_prompt, tool_calls_of
from ingest.importers.model import OBSERVATION_OF, Exchange, ImportedSession, ToolCallSpec, ToolExecution
from ingest.validation import check_content
from liverl.contracts import names
from liverl.contracts.chat import content_text
from liverl.v1 import common_pb2, model_call_pb2, session_event_pb2

POLICY_VERSION = "import"
AGENT_ID = "main"
STRUCTURAL_KEYS = frozenset({"role", "type"})  # names the format defines: kept as they are
ID_KEYS = frozenset({"id", "tool_call_id", OBSERVATION_OF})  # join keys: pseudonymised like the events' ids


@dataclass
class BuiltSession:
    session_id: str
    events: list[session_event_pb2.SessionEvent] = field(default_factory=list)
    calls: list[model_call_pb2.ModelCall] = field(default_factory=list)
    redacted: Counter = field(default_factory=Counter)


class SessionBuilder:
    """Builds one tenant's sessions of one format; `tokenizer` is the policy's (transformers)."""

    def __init__(self, tenant: str, fmt: str, tokenizer, redactor, fallback_time_ms: int):
        self.tenant = tenant
        self.origin = f"import:{fmt}"
        self.api = "openai-chat" if fmt == "openai-chat" else ""
        self.tokenizer = tokenizer
        self.redactor = redactor
        self.fallback_time_ms = fallback_time_ms

    def build(self, source: ImportedSession) -> BuiltSession:
        counts: Counter = Counter()
        session = _redacted(source, self.redactor, counts)
        return _Assembly(self, session, counts).run()

    def tokens(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []


class _Assembly:
    """The state of one session while its items are turned into messages, in order."""

    def __init__(self, builder: SessionBuilder, session: ImportedSession, counts: Counter):
        self.builder = builder
        self.session = session
        self.out = BuiltSession(session.session_id, redacted=counts)
        self.clock = session.start_ms or builder.fallback_time_ms
        self.assigned: dict[str, str] = {}  # source call id -> the session-unique call id it was given
        self.used: set[str] = set()
        self.answered: set[str] = set()  # call ids that already have a result
        self.seen = 0  # messages of the growing context already turned into events
        self.model_spoke = False

    def run(self) -> BuiltSession:
        s = self.session
        self.event(f"{s.identity}-start", "session_start", task_family=s.task_family, task_id=s.task_id,
                   attributes=s.attributes)
        for item in s.items:
            if isinstance(item, Exchange):
                self.exchange(item)
            else:
                self.execution(item)
        self.messages(s.trailing, f"{s.identity}-trailing")
        if s.outcome is not None:
            score = s.outcome.score if math.isfinite(s.outcome.score) else 0.0
            self.event(f"{s.identity}-outcome", "outcome", success=s.outcome.success, score=min(1.0, max(0.0, score)),
                       detail=s.outcome.detail,
                       metrics={k: v for k, v in s.outcome.metrics.items() if math.isfinite(v)})
        if s.end_reason:
            self.event(f"{s.identity}-end", "session_end", reason=s.end_reason)
        for message in [*self.out.events, *self.out.calls]:
            self.out.redacted += self.builder.redactor.redact_message(message)
        for event in self.out.events:  # the capture service's own rules (a Rejected is a ValueError)
            check_content(event)
        return self.out

    # --- items ---------------------------------------------------------------------------------

    def exchange(self, item: Exchange) -> None:
        self.tick(item.time_ms)
        context = item.messages
        new = context[self.seen:] if len(context) >= self.seen else _after_last_assistant(context)
        self.messages(new, item.source_id)
        request_id = f"import-{item.source_id}"
        self.out.calls.append(self.model_call(item, request_id))
        for index, call in enumerate(item.tool_calls):
            self.tool_call(call, f"{item.source_id}-call{index}", request_id)
        self.seen = len(context) + 1  # the answer is the next message of the context
        self.model_spoke = True
        if item.finish_ms:
            self.tick(item.finish_ms)

    def execution(self, item: ToolExecution) -> None:
        self.tick(item.time_ms)
        call_id = self.assigned.get(item.call.call_id)
        if call_id is None:  # a tool run no logged model call asked for: record the call too
            call_id = self.tool_call(item.call, f"{item.source_id}-call", "")
        if call_id not in self.answered:
            self.answered.add(call_id)
            self.event(f"{item.source_id}-result", "tool_result", call_id=call_id, output=item.output,
                       is_error=item.is_error)

    def messages(self, messages: list[dict], source_id: str) -> None:
        """Events for context messages the session had not shown yet (system prompts are context only)."""
        for index, message in enumerate(messages):
            key = f"{source_id}-m{index}"
            role = message.get("role")
            observed = message.get(OBSERVATION_OF)
            if role == "tool" or observed:
                original = str(observed or message.get("tool_call_id") or "")
                call_id = self.assigned.get(original, original)
                if call_id in self.answered and call_id:
                    continue
                self.answered.add(call_id)
                self.event(key, "tool_result", call_id=call_id, output=content_text(message.get("content")))
            elif role == "user":
                self.event(key, "user_message", text=content_text(message.get("content")), follow_up=self.model_spoke)
            elif role == "assistant":  # a turn the source did not log as a call: keep its tool calls
                for number, call in enumerate(tool_calls_of(message, f"{key}-call")):
                    self.tool_call(call, f"{key}-call{number}", "")
                self.model_spoke = True

    # --- messages ------------------------------------------------------------------------------

    def tool_call(self, call: ToolCallSpec, key: str, request_id: str) -> str:
        call_id = call.call_id or key
        if call_id in self.used:  # sources reuse ids (SWE-agent replays do): keep each call distinct
            call_id = f"{call_id}~{len(self.used)}"
        self.used.add(call_id)
        self.assigned[call.call_id] = call_id
        self.event(key, "tool_call", call_id=call_id, name=call.name, arguments_json=call.arguments_json,
                   request_id=request_id, valid=call.valid, error=call.error)
        return call_id

    def model_call(self, item: Exchange, request_id: str) -> model_call_pb2.ModelCall:
        builder = self.builder
        prompt = render_prompt(builder.tokenizer, item.messages, item.tools)
        completion = item.completion if item.calls_in_text else completion_text(item.completion, item.tool_calls)
        sampling = common_pb2.SamplingParams(**{k: v for k, v in item.sampling.items() if v is not None})
        return model_call_pb2.ModelCall(
            event_id=f"import-{item.source_id}-modelcall", request_id=request_id,
            session_id=self.session.session_id, tenant_id=builder.tenant, schema_version=names.EVENT_SCHEMA_VERSION,
            agent_role=common_pb2.AGENT_ROLE_SINGLE, agent_id=AGENT_ID, policy_version=POLICY_VERSION,
            model_name=item.model, prompt_token_ids=builder.tokens(prompt),
            completion_token_ids=builder.tokens(completion), sampling=sampling,
            request_time_ms=item.time_ms or self.clock, finish_time_ms=item.finish_ms or self.clock,
            finish_reason=item.finish_reason, api=builder.api, origin=builder.origin)

    def event(self, key: str, kind: str, **body) -> None:
        event = session_event_pb2.SessionEvent(
            event_id=f"import-{key}", session_id=self.session.session_id, tenant_id=self.builder.tenant,
            schema_version=names.EVENT_SCHEMA_VERSION, event_time_ms=self.clock, ingest_time_ms=self.clock,
            agent_role=common_pb2.AGENT_ROLE_SINGLE, agent_id=AGENT_ID, sequence=len(self.out.events),
            user_id=self.session.user_id)
        getattr(event, kind).CopyFrom(getattr(session_event_pb2, _BODY_TYPES[kind])(**body))
        self.out.events.append(event)
        self.clock += 1  # the source's events are ordered; distinct times keep that order by time too

    def tick(self, time_ms: int) -> None:
        if time_ms:
            self.clock = max(self.clock, time_ms)


_BODY_TYPES = {"session_start": "SessionStart", "session_end": "SessionEnd", "user_message": "UserMessage",
               "tool_call": "ToolCall", "tool_result": "ToolResult", "outcome": "Outcome"}


def _after_last_assistant(messages: list[dict]) -> list[dict]:
    """A context shorter than the one before (pruned or summarised): what came since the model last spoke."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return messages[index + 1:]
    return messages


def _redacted(session: ImportedSession, redactor, counts: Counter) -> ImportedSession:
    """A copy with every text redacted (and cut to the redactor's field limit): messages with their keys,
    tool definitions, tool calls, and ids (session, call ids) as the same pseudonyms redact_message gives,
    so what is rendered into the prompt never holds what the events lose."""
    text = lambda value: redactor.redact_text(value, counts)  # noqa: E731
    ident = lambda value: redactor.redact_id(value, counts)  # noqa: E731
    clean = copy.deepcopy(session)
    clean.session_id = ident(clean.session_id)
    for item in clean.items:
        if isinstance(item, Exchange):
            item.messages = [_redact_value(m, text, ident) for m in item.messages]
            item.tools = None if item.tools is None else [_redact_value(t, text, ident) for t in item.tools]
            item.completion = text(item.completion)
            item.model = text(item.model)
            if isinstance(item.sampling.get("stop"), list):
                item.sampling["stop"] = [text(str(s)) for s in item.sampling["stop"]]
            for call in item.tool_calls:
                _redact_call(call, text, ident)
        else:
            _redact_call(item.call, text, ident)
            item.output = text(item.output)
    clean.trailing = [_redact_value(m, text, ident) for m in clean.trailing]
    clean.task_id = ident(clean.task_id)
    clean.attributes = {text(k): text(v) for k, v in clean.attributes.items()}
    if clean.outcome is not None:
        clean.outcome.detail = text(clean.outcome.detail)
    return clean


def _redact_call(call: ToolCallSpec, text, ident) -> None:
    call.call_id = ident(call.call_id)
    call.name = text(call.name)
    call.arguments_json = text(call.arguments_json)
    call.error = text(call.error)


def _redact_value(value, text, ident, key: str = ""):
    if isinstance(value, str):
        return value if key in STRUCTURAL_KEYS else ident(value) if key in ID_KEYS else text(value)
    if isinstance(value, dict):
        redacted = {}
        for name, item in value.items():
            new = name if name in STRUCTURAL_KEYS or name in ID_KEYS or not isinstance(name, str) else text(name)
            while new in redacted:  # two keys redacted alike: keep both values
                new += "'"
            redacted[new] = _redact_value(item, text, ident, name)
        return redacted
    if isinstance(value, list):
        return [_redact_value(v, text, ident, key) for v in value]
    return value
