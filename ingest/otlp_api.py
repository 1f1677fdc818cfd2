"""OTLP/HTTP traces for products already instrumented with OpenTelemetry GenAI semantic conventions.

    POST /v1/traces   Authorization: Bearer <tenant token>
    Content-Type: application/json (OTLP JSON) or application/x-protobuf; Content-Encoding: gzip optional

Point the product's OTLP exporter at the capture service (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=
http://<capture>:8081/v1/traces, OTEL_EXPORTER_OTLP_TRACES_HEADERS="authorization=Bearer <token>").
Spans are mapped by ingest/importers/otlp.py (chat spans -> ModelCalls, execute_tool spans -> tool
calls and results; the session is gen_ai.conversation.id, else the trace) and built like `liverl import`
builds them: redacted, re-tokenized with the policy's tokenizer, origin "import:otlp", no behaviour
logprobs (these calls were not sampled by serving). The events then pass the same checks as every other
capture (validation, dedupe, session rules, redaction, dead letters); the spans of an opted-out or forgotten user
(user.id, or the user the session was started with) are dropped and counted, model calls included; the user is
stored as its keyed pseudonym, linked to the session for `liverl forget --user`; a session whose start
is refused has its model calls dead-lettered with it. Spans keep arriving while a conversation goes on, so no
session_end is written: the pipelines close the session when it goes idle. The answer is OTLP's
ExportTraceServiceResponse, with partialSuccess counting the spans that were dead-lettered.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from pathlib import Path

from ingest.capture import CaptureCore
from ingest.importers import otlp
from ingest.importers.build import SessionBuilder
from ingest.importers.model import BadInput, Exchange, ImportedSession, TooManyEvents
from ingest.importers.publish import records_of

SOURCE = "otlp-http"
ID_FIELDS = ("traceId", "spanId", "parentSpanId")  # bytes in protobuf, hex strings in OTLP JSON


class NotConfigured(RuntimeError):
    """The endpoint has no tokenizer to rebuild token ids with (HTTP 501: exporters do not retry it)."""


class NotOtlp(ValueError):
    """The body is not an ExportTraceServiceRequest (HTTP 400)."""


class TooManySpanEvents(ValueError):
    """The request would fan out into more events than ingest.max_events_per_request (HTTP 413)."""


@dataclass
class MappedRequest:
    """One request's spans grouped into sessions, not built yet; `events` bounds what building makes."""

    tenant: str
    spans: int
    sessions: list[ImportedSession]
    bad: list[BadInput]
    events: int


class OtlpTraces:
    """Turns one tenant's ExportTraceServiceRequest into stored SessionEvents, ModelCalls and dead letters."""

    def __init__(self, core: CaptureCore, tokenizer_dir: Path | None, max_events: int | None = None):
        """max_events: the most events and model calls one request may become (None: no limit)."""
        self.core = core
        self.max_events = max_events
        self.tokenizer_dir = tokenizer_dir
        self._tokenizer = None
        self._lock = threading.Lock()

    def tokenizer(self):
        if self.tokenizer_dir is None:
            raise NotConfigured("the OTLP endpoint rebuilds token ids with the policy's tokenizer and none is set: "
                                "set serving.policy_dir (the policy's Hugging Face folder) for the capture service")
        with self._lock:
            if self._tokenizer is None:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_dir))
        return self._tokenizer

    def capture(self, tenant: str, document: object) -> tuple[int, str]:
        """map, then store (no rate limit between them: callers that charge one call the two)."""
        return self.store(self.map(tenant, document))

    def map(self, tenant: str, document: object) -> MappedRequest:
        """The request's sessions and how many events they become at most; raises NotOtlp (misshapen),
        TooManySpanEvents (over max_events: nothing is built, so a huge fan-out costs no more than its read)."""
        spans, bad = otlp.spans_of(document, SOURCE)
        if bad:
            raise NotOtlp(bad[0].message)
        try:
            sessions, bad = otlp.sessions_from_spans(spans, SOURCE, self.max_events)
        except TooManyEvents as error:
            raise TooManySpanEvents(f"the spans would become {error} (ingest.max_events_per_request); send "
                                    "fewer spans, or fewer messages and tool calls per span, per request") from None
        events = len(bad) + sum(1 + sum(otlp.events_of_item(item) for item in session.items) for session in sessions)
        return MappedRequest(tenant, len(spans), sessions, bad, events)

    def store(self, mapped: MappedRequest) -> tuple[int, str]:
        """Store what the spans say; returns (spans dead-lettered, why the first one was). Raises
        NotConfigured, and SpoolFull when nothing could be made durable."""
        tenant, spans, sessions, bad = mapped.tenant, mapped.spans, mapped.sessions, mapped.bad
        core, now_ms = self.core, int(self.core.clock() * 1000)
        if core.opt_out.tenant(tenant):
            core.metrics.dropped.labels("opt_out").inc(spans)
            return 0, ""
        sessions = self._as_subjects(tenant, self._without_opted_out(tenant, sessions))
        builder = SessionBuilder(tenant, otlp.FORMAT, self.tokenizer(), core.redactor_for(tenant), now_ms)
        dead = [core.dead_letter(b.reason, b.message, tenant, b.source.encode(), None, now_ms) for b in bad]
        refused, first_reason = len(bad), (f"{bad[0].reason}: {bad[0].message}" if bad else "")
        events, calls, links = [], [], []
        for session in sessions:
            session.end_reason = ""  # more spans of this conversation may come: it ends by idleness
            try:
                built = builder.build(session)
                calls.append((built, session, records_of(built, tenant, core.topics)[len(built.events):]))
            except (ValueError, TypeError, KeyError, AttributeError) as error:  # one session's content
                message = f"a session cannot be built: {type(error).__name__}: {error}"
                keyed = core.redactor_for(tenant).redact_id(session.session_id)  # as its events would be keyed
                core.subjects.link(tenant, session.user_id, keyed, links)  # erased with its user's sessions
                dead.append(core.dead_letter("unbuildable_session", message, tenant, session.source.encode(), None,
                                             now_ms, keyed))
                refused += len(session.items)
                first_reason = first_reason or message
                continue
            events += built.events
        response = core.capture(tenant, events, lambda event: event, "otlp")
        refused_starts = {events[r.index].session_id: r for r in response.rejected
                          if events[r.index].WhichOneof("body") == "session_start"}
        records = []
        for built, session, call_records in calls:
            rejection = refused_starts.get(built.session_id)  # both the redacted (pseudonymised) session id
            if rejection is None:
                records += call_records
                continue
            spans_lost = sum(isinstance(item, Exchange) for item in session.items)
            refused += spans_lost
            first_reason = first_reason or f"{rejection.reason}: {rejection.message}"
            # keyed (so sealed) by their session, which capture linked to its user with the refused events
            dead += [core.dead_letter(rejection.reason, f"model call of a refused session: {rejection.message}",
                                      tenant, call.SerializeToString(), None, now_ms, built.session_id)
                     for call in built.calls]
        core.subjects.write(tenant, links, set(), core.subjects.forgotten(tenant))
        core.delivery.deliver(records + dead)
        if response.rejected and not first_reason:
            first = response.rejected[0]
            first_reason = f"{first.reason}: {first.message}"
        return refused, first_reason


    def _without_opted_out(self, tenant: str, sessions: list[ImportedSession]) -> list[ImportedSession]:
        """Drop (and count, per span) the sessions of opted-out users before anything of them is built: their
        model calls never reach Kafka, unlike events, which capture would drop one by one anyway."""
        kept = []
        for session in sessions:
            if self.core.opted_out(tenant, session.user_id, session.session_id):
                self.core.metrics.dropped.labels("opt_out").inc(len(session.items))
            else:
                kept.append(session)
        return kept


    def _as_subjects(self, tenant: str, sessions: list[ImportedSession]) -> list[ImportedSession]:
        """Each session's user as the tenant's keyed pseudonym, before building redacts the id (an email would
        become "[REDACTED:email]", one id for all such users, so `liverl forget --user` could never find them);
        capture then links the pseudonym to the session, as it does the SDK's. The sessions of a forgotten user
        are dropped (counted per span), model calls included: a forgotten subject never comes back."""
        subjects = self.core.subjects
        forgotten = subjects.forgotten(tenant)
        kept = []
        for session in sessions:
            session.user_id = subjects.pseudonyms.user(tenant, session.user_id)
            if session.user_id and session.user_id in forgotten:
                self.core.metrics.dropped.labels("forgotten").inc(len(session.items))
            else:
                kept.append(session)
        return kept


def protobuf_document(body: bytes) -> dict:
    """An ExportTraceServiceRequest in protobuf as the OTLP JSON the mapping reads (hex span and trace ids)."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))
    except DecodeError as error:
        raise NotOtlp(f"the body is not a protobuf ExportTraceServiceRequest ({error})") from None
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for field in ID_FIELDS:
                    if field in span:
                        span[field] = base64.b64decode(span[field]).hex()
    return document


def protobuf_response(rejected_spans: int, message: str) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse()
    if rejected_spans or message:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = message
    return response.SerializeToString()


def json_response(rejected_spans: int, message: str) -> dict:
    if not rejected_spans and not message:
        return {}
    return {"partialSuccess": {"rejectedSpans": str(rejected_spans), "errorMessage": message}}
