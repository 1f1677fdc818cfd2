"""OpenTelemetry GenAI spans (OTLP JSON): the standalone mapping, and `liverl import --format otlp`."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.ingest.conftest import read_topic
from tests.ingest.importers.conftest import make_tokenizer_dir, messages_of, run_import, source_words

T0 = 1767225600_000_000_000  # ns


def attr(key: str, value) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}}
    return {"key": key, "value": {"stringValue": value}}


def span(span_id: str, start_s: int, attributes: dict, name: str = "chat", status: dict | None = None) -> dict:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": name,
            "startTimeUnixNano": str(T0 + start_s * 1_000_000_000),
            "endTimeUnixNano": str(T0 + start_s * 1_000_000_000 + 500_000_000),
            "attributes": [attr(k, v) for k, v in attributes.items()], "status": status or {}}


def otlp_document() -> dict:
    first_input = [{"role": "user", "parts": [{"type": "text", "content": "weather in paris please"}]}]
    first_output = [{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "tool_call", "id": "call_w", "name": "get_weather", "arguments": {"city": "paris"}}]}]
    second_input = [*first_input, {"role": "assistant", "parts": first_output[0]["parts"]},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_w", "response": "timeout"}]}]
    second_output = [{"role": "assistant", "parts": [{"type": "text", "content": "the weather service is down"}]}]
    spans = [
        span("a1", 0, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                       "gen_ai.conversation.id": "conv-9", "gen_ai.request.temperature": 0.2,
                       "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "be brief"}]),
                       "gen_ai.input.messages": json.dumps(first_input),
                       "gen_ai.output.messages": json.dumps(first_output)}),
        span("a2", 1, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                       "gen_ai.tool.call.id": "call_w", "gen_ai.tool.call.arguments": '{"city": "paris"}',
                       "gen_ai.tool.call.result": "timeout"}, name="execute_tool get_weather",
             status={"code": 2, "message": "timeout"}),
        span("a3", 2, {"gen_ai.operation.name": "chat", "gen_ai.response.model": "gpt-4o-mini",
                       "gen_ai.response.finish_reasons": ["stop"],
                       "gen_ai.input.messages": json.dumps(second_input),
                       "gen_ai.output.messages": json.dumps(second_output)}),
        span("a4", 3, {"http.method": "GET"}, name="GET /health"),  # not GenAI: ignored
        span("a5", 4, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),  # no content captured
    ]
    legacy = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b1", "name": "completion",
              "startTimeUnixNano": str(T0), "attributes": [
                  attr("gen_ai.operation.name", "text_completion"), attr("gen_ai.prompt.0.role", "user"),
                  attr("gen_ai.prompt.0.content", "say hi"), attr("gen_ai.completion.0.content", "hi")]}
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", "weather-agent")]},
                               "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai"},
                                               "spans": [*spans, legacy]}]}]}


def test_mapping_module_stands_alone():
    """The capture service can reuse the mapping: importing it pulls in neither Kafka nor the capture core."""
    code = ("import sys, ingest.importers.otlp; "
            "assert not {'kafka', 'ingest.capture', 'transformers'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spans_map_to_one_session_per_conversation(tmp_path):
    from ingest.importers import otlp
    from ingest.importers.model import BadInput, Exchange, ToolExecution

    path = tmp_path / "spans.json"
    path.write_text(json.dumps(otlp_document()))
    found = list(otlp.read(path))
    bad = [f for f in found if isinstance(f, BadInput)]
    sessions = {s.session_id: s for s in found if not isinstance(s, BadInput)}
    assert [b.reason for b in bad] == ["invalid_span"] and "span a5" in bad[0].source
    weather = sessions["conv-9"]
    assert [type(i) for i in weather.items] == [Exchange, ToolExecution, Exchange]
    first, run, second = weather.items
    assert first.messages[0] == {"role": "system", "content": "be brief"}
    assert first.tool_calls[0].name == "get_weather"
    assert json.loads(first.tool_calls[0].arguments_json) == {"city": "paris"}
    assert first.sampling == {"temperature": 0.2} and first.time_ms == T0 // 1_000_000
    assert run.is_error and run.output == "timeout"
    assert second.model == "gpt-4o-mini" and second.completion == "the weather service is down"
    legacy = sessions["otlp-trace-0af7651916cd43dd8448eb211c80319c"]
    assert legacy.items[0].messages == [{"role": "user", "content": "say hi"}] and legacy.items[0].completion == "hi"


def test_otlp_import_publishes_each_result_once(fresh_topics, tmp_path):
    from liverl.v1 import model_call_pb2, session_event_pb2

    path = tmp_path / "spans.json"
    path.write_text(json.dumps(otlp_document()))
    tokenizer_dir = make_tokenizer_dir(tmp_path / "tok", source_words("otlp", [path]))
    code, out = run_import(fresh_topics, ["--format", "otlp", "--tenant", "acme", "--tokenizer", str(tokenizer_dir),
                                          "--spool-dir", str(tmp_path / "spool"), str(path)])
    assert code == 0, out
    assert "imported 2 sessions" in out and "3 model calls" in out and "skipped 1 (invalid_span: 1)" in out
    events = messages_of(read_topic(fresh_topics, fresh_topics.kafka.session_events_topic, want=9),
                         session_event_pb2.SessionEvent)
    calls = messages_of(read_topic(fresh_topics, fresh_topics.kafka.model_calls_topic, want=3),
                        model_call_pb2.ModelCall)
    weather = [e for e in events if e.session_id == "conv-9"]
    assert [e.WhichOneof("body") for e in weather] == [
        "session_start", "user_message", "tool_call", "tool_result", "session_end"]
    assert weather[3].tool_result.is_error and weather[3].tool_result.call_id == "call_w"
    assert all(c.origin == "import:otlp" and c.policy_version == "import" for c in calls)
    assert len([c for c in calls if c.session_id == "conv-9"]) == 2
