"""OpenTelemetry GenAI spans (OTLP JSON) -> ImportedSessions. Stands alone (standard library and the
importer model and chat helpers only) so an OTLP endpoint of the capture service can reuse it.

Input: an ExportTraceServiceRequest as OTLP JSON ({"resourceSpans": [{"resource", "scopeSpans": [{"spans"}]}]}),
or a file of them, one per line (the collector's file exporter). Spans follow the GenAI semantic
conventions:
- model calls: gen_ai.operation.name "chat" / "text_completion" / "generate_content", with the messages
  in gen_ai.input.messages / gen_ai.output.messages (structured parts; gen_ai.system_instructions
  first), or the older gen_ai.prompt / gen_ai.completion (a JSON message list, plain text, or
  flattened as gen_ai.prompt.<i>.role / .content), also accepted as span events gen_ai.content.prompt /
  gen_ai.content.completion; model from gen_ai.response.model or gen_ai.request.model; sampling from
  gen_ai.request.*; finish reason from gen_ai.response.finish_reasons;
- tool runs: gen_ai.operation.name "execute_tool" with gen_ai.tool.name, gen_ai.tool.call.id,
  gen_ai.tool.call.arguments, gen_ai.tool.call.result; an ERROR status marks the result an error;
- the session: gen_ai.conversation.id (or session.id), on the span or on any span of its trace;
  without either, the trace is the session;
- the end user: user.id (or the older enduser.id), on the span or its resource.
Other spans (HTTP, invoke_agent, ...) are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ingest.importers.chat import parsed_call, tool_calls_of
from ingest.importers.model import BadInput, Exchange, ImportedSession, ToolExecution, TooManyEvents, digest
from liverl.contracts.chat import content_text

FORMAT = "otlp"
TASK_FAMILY = "agent"
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATION = "execute_tool"
USER_ID, LEGACY_USER_ID = "user.id", "enduser.id"
STATUS_ERROR = (2, "STATUS_CODE_ERROR")
SAMPLING_ATTRIBUTES = {"temperature": ("gen_ai.request.temperature", float), "top_p": ("gen_ai.request.top_p", float),
                       "top_k": ("gen_ai.request.top_k", int), "max_tokens": ("gen_ai.request.max_tokens", int),
                       "seed": ("gen_ai.request.seed", int)}


def read(path: Path) -> Iterator[ImportedSession | BadInput]:
    """Sessions of an OTLP JSON file (one request, or one request per line)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        documents = [(str(path), json.loads(text))]
    except ValueError:
        documents = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                documents.append((f"{path}:{number}", json.loads(line)))
            except ValueError as error:
                yield BadInput(f"{path}:{number}", "invalid_json", f"not OTLP JSON ({error}); write one "
                                                                   "ExportTraceServiceRequest per line or per file")
    spans: list[tuple[str, dict]] = []
    for source, document in documents:
        found, bad = spans_of(document, source)
        spans += found
        yield from bad
    sessions, bad = sessions_from_spans(spans, path.name)
    yield from bad
    yield from sessions


class NotOtlpShape(ValueError):
    """A part of the request is not shaped as OTLP JSON says; the message names where, never the value."""


def spans_of(document: object, source: str) -> tuple[list[tuple[str, dict]], list[BadInput]]:
    """(source, span) for every span of an ExportTraceServiceRequest, resource attributes merged under
    the span's own. A request any part of which is misshapen (a list where an object belongs, an intValue
    that is no integer, ...) gives no spans and one BadInput "invalid_otlp" naming the place."""
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        return [], [BadInput(source, "not_otlp",
                             'no "resourceSpans" list: export OTLP JSON (an ExportTraceServiceRequest)')]
    try:
        return _checked_spans(document, source), []
    except NotOtlpShape as error:
        return [], [BadInput(source, "invalid_otlp", f"{error}; send an ExportTraceServiceRequest as OTLP JSON "
                                                     "(opentelemetry-proto's JSON mapping)")]
    except RecursionError:
        return [], [BadInput(source, "invalid_otlp", "the request nests too deep; send flat attribute values")]


def _checked_spans(document: dict, source: str) -> list[tuple[str, dict]]:
    found = []
    for r, resource_spans in enumerate(document["resourceSpans"]):
        where = f"resourceSpans[{r}]"
        _entry(resource_spans, where)
        resource = _object(resource_spans.get("resource"), f"{where}.resource")
        resource_attributes = attributes(resource.get("attributes"), f"{where}.resource.attributes")
        for s, scope_spans in enumerate(_list(resource_spans.get("scopeSpans"), f"{where}.scopeSpans")):
            scope_where = f"{where}.scopeSpans[{s}]"
            _entry(scope_spans, scope_where)
            for n, span in enumerate(_list(scope_spans.get("spans"), f"{scope_where}.spans")):
                span_where = f"{scope_where}.spans[{n}]"
                _entry(span, span_where)
                _check_span(span, span_where)
                found.append((source, {**span, "_attributes": {**resource_attributes,
                                                               **attributes(span.get("attributes"),
                                                                            f"{span_where}.attributes")}}))
    return found


def _check_span(span: dict, where: str) -> None:
    for field in ("traceId", "spanId", "parentSpanId", "name"):
        if not isinstance(span.get(field, ""), str):
            raise NotOtlpShape(f"{where}.{field} must be a string")
    for field in ("startTimeUnixNano", "endTimeUnixNano"):
        value = span.get(field, "0")
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
            raise NotOtlpShape(f"{where}.{field} must be unix nanoseconds (an integer or a string of digits)")
    status = _object(span.get("status"), f"{where}.status")
    if not isinstance(status.get("code", 0), (int, str)) or not isinstance(status.get("message", ""), str):
        raise NotOtlpShape(f"{where}.status must be {{\"code\": <int or name>, \"message\": <string>}}")
    for e, event in enumerate(_list(span.get("events"), f"{where}.events")):
        _entry(event, f"{where}.events[{e}]")
        if not isinstance(event.get("name", ""), str):
            raise NotOtlpShape(f"{where}.events[{e}].name must be a string")
        attributes(event.get("attributes"), f"{where}.events[{e}].attributes")


def _object(value: object, where: str) -> dict:
    """value when it is an object, {} when absent (null); NotOtlpShape otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotOtlpShape(f"{where} must be an object, not {type(value).__name__}")
    return value


def _entry(value: object, where: str) -> None:
    """A list entry must be an object (null included: it is no span, no scope)."""
    if not isinstance(value, dict):
        raise NotOtlpShape(f"{where} must be an object, not {type(value).__name__}")


def _list(value: object, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NotOtlpShape(f"{where} must be a list, not {type(value).__name__}")
    return value


def sessions_from_spans(spans: list[tuple[str, dict]], source_name: str,
                        max_events: int | None = None) -> tuple[list[ImportedSession], list[BadInput]]:
    """Group GenAI spans into sessions (conversation id, else trace), in start-time order.
    max_events: raise TooManyEvents as soon as the spans would become more events and model calls than
    this (one span fans out: each message and tool call is an event); None: no limit."""
    events = 0
    conversation_of_trace: dict[str, str] = {}
    for _, span in spans:
        named = _conversation(span["_attributes"])
        if named:
            conversation_of_trace.setdefault(str(span.get("traceId", "")), named)
    sessions: dict[str, ImportedSession] = {}
    bad: list[BadInput] = []
    for source, span in sorted(spans, key=lambda item: _nanos(item[1].get("startTimeUnixNano"))):
        trace_id, span_id = str(span.get("traceId", "")), str(span.get("spanId", ""))
        place = f"{source} span {span_id or '?'}"
        try:
            item = _item(span, digest(FORMAT, trace_id, span_id), max_events)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as error:  # one span's content
            bad.append(BadInput(place, "invalid_span", str(error) if isinstance(error, ValueError) else
                                f"the span's GenAI attributes are not shaped as the semantic conventions say "
                                f"({type(error).__name__})"))
            continue
        if item is None:
            continue
        named = _conversation(span["_attributes"]) or conversation_of_trace.get(trace_id, "")
        session_id = named or f"otlp-trace-{trace_id}"
        session = sessions.get(session_id)
        events += events_of_item(item, max_events) + (session is None)  # a new session: its session_start too
        if max_events is not None and events > max_events:
            raise TooManyEvents(events, max_events, "events and model calls (and counting)")
        if session is None:
            session = sessions[session_id] = ImportedSession(
                source=place, identity=digest(FORMAT, "session", session_id), session_id=session_id,
                task_family=str(span["_attributes"].get("liverl.task_family") or TASK_FAMILY),
                task_id=str(span["_attributes"].get("liverl.task_id") or ""), start_ms=item.time_ms,
                attributes={"source_format": FORMAT, "source_file": source_name})
        session.user_id = session.user_id or _user(span["_attributes"])
        session.items.append(item)
    return list(sessions.values()), bad


def _user(attrs: dict) -> str:
    """The span's (or its resource's) end user: OpenTelemetry's user.id, or the older enduser.id."""
    user = attrs.get(USER_ID) or attrs.get(LEGACY_USER_ID)
    return user if isinstance(user, str) else ""


def events_of_item(item: Exchange | ToolExecution, max_events: int | None = None) -> int:
    """The most events and model calls the builder makes of one item (an upper bound: context messages
    shown before are skipped there)."""
    if isinstance(item, ToolExecution):
        return 2  # the call (when no model call asked for it) and its result
    earlier_calls = sum(len(tool_calls_of(m, "", max_events)) for m in item.messages
                        if isinstance(m, dict) and m.get("tool_calls"))
    return len(item.messages) + earlier_calls + len(item.tool_calls) + 1  # + the model call


def _item(span: dict, source_id: str, max_events: int | None = None) -> Exchange | ToolExecution | None:
    attrs = _with_event_attributes(span)
    operation = str(attrs.get("gen_ai.operation.name") or "")
    time_ms = _nanos(span.get("startTimeUnixNano")) // 1_000_000
    if operation == TOOL_OPERATION:
        call_id = str(attrs.get("gen_ai.tool.call.id") or span.get("spanId") or source_id)
        call = parsed_call(call_id, str(attrs.get("gen_ai.tool.name") or ""),
                           _json_text(attrs.get("gen_ai.tool.call.arguments")))
        status = (span.get("status") or {}).get("code")
        return ToolExecution(source_id, call, _json_text(attrs.get("gen_ai.tool.call.result")),
                             is_error=status in STATUS_ERROR or bool(attrs.get("error.type")), time_ms=time_ms)
    has_messages = any(key.startswith(("gen_ai.input.messages", "gen_ai.prompt")) for key in attrs)
    if operation not in MODEL_OPERATIONS and not (not operation and has_messages):
        return None
    messages = _input_messages(attrs)
    if not messages:
        raise ValueError(f"a {operation or 'gen_ai'} span without input messages (gen_ai.input.messages or "
                         "gen_ai.prompt): enable message content capture in the instrumentation")
    answer = _output_message(attrs)
    if answer is None:
        raise ValueError("a model-call span without output (gen_ai.output.messages or gen_ai.completion)")
    reasons = attrs.get("gen_ai.response.finish_reasons")
    finish = (reasons[0] if isinstance(reasons, list) and reasons else reasons) or answer.get("finish_reason") or "stop"
    sampling = {name: kind(attrs[key]) for name, (key, kind) in SAMPLING_ATTRIBUTES.items()
                if isinstance(attrs.get(key), (int, float)) and not isinstance(attrs.get(key), bool)}
    if isinstance(attrs.get("gen_ai.request.stop_sequences"), list):
        sampling["stop"] = [str(s) for s in attrs["gen_ai.request.stop_sequences"]]
    return Exchange(
        source_id=source_id, messages=messages, completion=content_text(answer.get("content")),
        tool_calls=tool_calls_of(answer, f"{source_id}-call", max_events),
        model=str(attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model") or ""),
        time_ms=time_ms, finish_ms=_nanos(span.get("endTimeUnixNano")) // 1_000_000,
        finish_reason=str(finish), sampling=sampling)


# --- messages ------------------------------------------------------------------------------------

def _input_messages(attrs: dict) -> list[dict]:
    messages: list[dict] = []
    system = _loaded(attrs.get("gen_ai.system_instructions"))
    if system:
        messages.append({"role": "system", "content": _parts_text(system if isinstance(system, list) else [system])})
    structured = _loaded(attrs.get("gen_ai.input.messages"))
    if isinstance(structured, list):
        for message in structured:
            messages += _openai_messages(message)
        return messages
    return messages + _legacy(attrs, "gen_ai.prompt", "user")


def _output_message(attrs: dict) -> dict | None:
    structured = _loaded(attrs.get("gen_ai.output.messages"))
    if isinstance(structured, list) and structured:
        converted = _openai_messages(structured[0])
        if converted:
            return {**converted[0], "finish_reason": structured[0].get("finish_reason")}
    legacy = _legacy(attrs, "gen_ai.completion", "assistant")
    return legacy[0] if legacy else None


def _openai_messages(message: object) -> list[dict]:
    """A semconv message ({"role", "parts": [...]}) as OpenAI messages (tool responses become tool messages)."""
    if not isinstance(message, dict):
        return []
    if "parts" not in message:  # already OpenAI-shaped
        return [message]
    role = str(message.get("role") or "user")
    parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
    calls = [{"id": str(p.get("id") or ""), "type": "function",
              "function": {"name": str(p.get("name") or ""), "arguments": _json_text(p.get("arguments"))}}
             for p in parts if p.get("type") == "tool_call"]
    responses = [{"role": "tool", "tool_call_id": str(p.get("id") or ""), "content": _json_text(p.get("response"))}
                 for p in parts if p.get("type") == "tool_call_response"]
    text = _parts_text(parts)
    converted = [] if (responses and not text and not calls) else [{"role": role, "content": text}]
    if calls and converted:
        converted[0]["tool_calls"] = calls
    return converted + responses


def _parts_text(parts: list) -> str:
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") == "text":
            texts.append(str(part.get("content") or part.get("text") or ""))
    return "\n".join(texts)


def _legacy(attrs: dict, prefix: str, default_role: str) -> list[dict]:
    """gen_ai.prompt / gen_ai.completion: a JSON message list, plain text, or flattened <prefix>.<i>.<field>."""
    value = attrs.get(prefix)
    if value is not None:
        loaded = _loaded(value)
        if isinstance(loaded, list):
            return [m for m in loaded if isinstance(m, dict)]
        if isinstance(loaded, dict):
            return [loaded]
        return [{"role": default_role, "content": str(value)}]
    flattened: dict[int, dict] = {}
    for key, item in attrs.items():
        if key.startswith(prefix + "."):
            index, _, name = key[len(prefix) + 1:].partition(".")
            if index.isdigit() and name in ("role", "content", "tool_call_id"):
                flattened.setdefault(int(index), {})[name] = item
    return [{"role": default_role, **flattened[i]} for i in sorted(flattened)]


# --- OTLP values ---------------------------------------------------------------------------------

def attributes(items: object, where: str = "attributes") -> dict:
    """OTLP JSON attributes ([{"key", "value": {"stringValue": ...}}]) as a plain dict; NotOtlpShape when
    they are not shaped so."""
    found = {}
    for index, item in enumerate(_list(items, where)):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise NotOtlpShape(f"{where}[{index}] must be an object with a string \"key\"")
        found[item["key"]] = value_of(item.get("value"), f"{where}[{index}].value")
    return found


def value_of(value: object, where: str = "value"):
    """An OTLP AnyValue as a plain value (None when empty); NotOtlpShape when it is not one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise NotOtlpShape(f"{where} must be an AnyValue object, not {type(value).__name__}")
    if "stringValue" in value:
        return _typed(value["stringValue"], str, f"{where}.stringValue", "a string")
    if "intValue" in value:  # a string in OTLP JSON (64-bit)
        raw = value["intValue"]
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise NotOtlpShape(f"{where}.intValue must be an integer or a string of one")
        try:
            number = int(raw)
        except ValueError:
            raise NotOtlpShape(f"{where}.intValue is not an integer") from None
        if not -(1 << 63) <= number < (1 << 63):
            raise NotOtlpShape(f"{where}.intValue is outside the 64-bit range")
        return number
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise NotOtlpShape(f"{where}.doubleValue must be a number")
        try:
            return float(raw)
        except ValueError:
            raise NotOtlpShape(f"{where}.doubleValue is not a number") from None
    if "boolValue" in value:
        return _typed(value["boolValue"], bool, f"{where}.boolValue", "true or false")
    if "arrayValue" in value:
        array = _object(value["arrayValue"], f"{where}.arrayValue")
        return [value_of(v, f"{where}.arrayValue.values[{i}]")
                for i, v in enumerate(_list(array.get("values"), f"{where}.arrayValue.values"))]
    if "kvlistValue" in value:
        kvlist = _object(value["kvlistValue"], f"{where}.kvlistValue")
        return attributes(kvlist.get("values"), f"{where}.kvlistValue.values")
    if "bytesValue" in value:
        return _typed(value["bytesValue"], str, f"{where}.bytesValue", "a base64 string")
    return None


def _typed(value: object, kind: type, where: str, what: str):
    if not isinstance(value, kind):
        raise NotOtlpShape(f"{where} must be {what}")
    return value


def _with_event_attributes(span: dict) -> dict:
    """Span attributes, plus those of the older gen_ai.content.* span events where the span lacks them."""
    attrs = dict(span["_attributes"])
    for event in span.get("events") or []:
        if isinstance(event, dict) and str(event.get("name", "")).startswith("gen_ai.content."):
            for key, value in attributes(event.get("attributes")).items():
                attrs.setdefault(key, value)
    return attrs


def _conversation(attrs: dict) -> str:
    return str(attrs.get("gen_ai.conversation.id") or attrs.get("session.id") or "")


def _loaded(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _json_text(value) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _nanos(value) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
