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
  without either, the trace is the session. Other spans (HTTP, invoke_agent, ...) are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from liverl.contracts.chat import content_text
from ingest.importers.chat import parsed_call, tool_calls_of
from ingest.importers.model import BadInput, Exchange, ImportedSession, ToolExecution, digest

FORMAT = "otlp"
TASK_FAMILY = "agent"
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATION = "execute_tool"
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


def spans_of(document: object, source: str) -> tuple[list[tuple[str, dict]], list[BadInput]]:
    """(source, span) for every span of an ExportTraceServiceRequest, resource attributes merged under
    the span's own."""
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        return [], [BadInput(source, "not_otlp",
                             'no "resourceSpans" list: export OTLP JSON (an ExportTraceServiceRequest)')]
    found = []
    for resource_spans in document["resourceSpans"]:
        resource = attributes((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                if isinstance(span, dict):
                    found.append((source, {**span, "_attributes": {**resource, **attributes(span.get("attributes"))}}))
    return found, []


def sessions_from_spans(spans: list[tuple[str, dict]],
                        source_name: str) -> tuple[list[ImportedSession], list[BadInput]]:
    """Group GenAI spans into sessions (conversation id, else trace), in start-time order."""
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
            item = _item(span, digest(FORMAT, trace_id, span_id))
        except ValueError as error:
            bad.append(BadInput(place, "invalid_span", str(error)))
            continue
        if item is None:
            continue
        named = _conversation(span["_attributes"]) or conversation_of_trace.get(trace_id, "")
        session_id = named or f"otlp-trace-{trace_id}"
        session = sessions.get(session_id)
        if session is None:
            session = sessions[session_id] = ImportedSession(
                source=place, identity=digest(FORMAT, "session", session_id), session_id=session_id,
                task_family=str(span["_attributes"].get("liverl.task_family") or TASK_FAMILY),
                task_id=str(span["_attributes"].get("liverl.task_id") or ""), start_ms=item.time_ms,
                attributes={"source_format": FORMAT, "source_file": source_name})
        session.items.append(item)
    return list(sessions.values()), bad


def _item(span: dict, source_id: str) -> Exchange | ToolExecution | None:
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
        tool_calls=tool_calls_of(answer, f"{source_id}-call"),
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

def attributes(items: object) -> dict:
    """OTLP JSON attributes ([{"key", "value": {"stringValue": ...}}]) as a plain dict."""
    return {str(item.get("key")): value_of(item.get("value")) for item in items or []
            if isinstance(item, dict) and "key" in item}


def value_of(value: object):
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])  # a string in OTLP JSON (64-bit)
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [value_of(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values"))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


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
