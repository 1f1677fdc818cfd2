"""`liverl import --format openai-chat`: chat-completion logs (JSONL) through the real broker."""

from __future__ import annotations

import json
from collections import Counter

from tests.ingest.conftest import read_topic
from tests.ingest.importers.conftest import make_tokenizer_dir, messages_of, run_import, source_words

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
FIRST = [{"role": "system", "content": "you fix files"}, {"role": "user", "content": "fix the bug in app.py"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "bug"}'}}


def log_lines() -> list[str]:
    first = {"request": {"model": "gpt-4o", "messages": FIRST, "tools": TOOLS, "temperature": 0.5,
                         "metadata": {"session_id": "conv-1", "task_family": "coding"}},
             "response": {"id": "chatcmpl-1", "created": 1767225600, "model": "gpt-4o-2024",
                          "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                                       "finish_reason": "tool_calls"}]}}
    second_messages = [*FIRST, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "found it in app.py line 3"}]
    second = {"session_id": "conv-1",
              "request": {"model": "gpt-4o", "messages": second_messages, "tools": TOOLS},
              "response": {"created": 1767225601, "model": "gpt-4o-2024",
                           "choices": [{"message": {"role": "assistant", "content": "fixed line 3"},
                                        "finish_reason": "stop"}]}}
    flat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "mail bob@example.com the fix"}],
            "choices": [{"message": {"role": "assistant", "content": "sent"}, "finish_reason": "stop"}]}
    return [json.dumps(first), json.dumps(second), "", json.dumps(flat), "{not json",
            json.dumps({"request": {"messages": []}, "response": {}})]


def test_chat_logs_become_sessions_and_bad_lines_are_reported(fresh_topics, tmp_path):
    from transformers import AutoTokenizer

    from liverl.v1 import model_call_pb2, session_event_pb2

    log = tmp_path / "calls.jsonl"
    log.write_text("\n".join(log_lines()) + "\n")
    tokenizer_dir = make_tokenizer_dir(tmp_path / "tok", source_words("openai-chat", [log]))
    code, out = run_import(fresh_topics, ["--format", "openai-chat", "--tenant", "acme", "--tokenizer",
                                          str(tokenizer_dir), "--spool-dir", str(tmp_path / "spool"), str(log)])
    assert code == 0, out
    assert "imported 2 sessions" in out and "3 model calls" in out
    assert "skipped 2 (invalid_json: 1, not_a_chat_completion: 1)" in out
    assert f"{log}:5: invalid_json" in out and f"{log}:6: not_a_chat_completion" in out
    assert "redacted: email 1" in out

    events = messages_of(read_topic(fresh_topics, fresh_topics.kafka.session_events_topic, want=10),
                         session_event_pb2.SessionEvent)
    calls = messages_of(read_topic(fresh_topics, fresh_topics.kafka.model_calls_topic, want=3),
                        model_call_pb2.ModelCall)
    conversation = [e for e in events if e.session_id == "conv-1"]
    assert [e.WhichOneof("body") for e in conversation] == [
        "session_start", "user_message", "tool_call", "tool_result", "session_end"]
    assert conversation[0].session_start.task_family == "coding"
    assert conversation[2].tool_call.name == "search" and conversation[2].tool_call.valid
    assert conversation[3].tool_result.call_id == conversation[2].tool_call.call_id == "call_1"
    assert conversation[1].event_time_ms >= 1767225600000

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    mine = sorted((c for c in calls if c.session_id == "conv-1"), key=lambda c: c.request_time_ms)
    assert [c.model_name for c in mine] == ["gpt-4o-2024"] * 2 and mine[0].sampling.temperature == 0.5
    assert conversation[2].tool_call.request_id == mine[0].request_id
    tool_call = '<tool_call>{"name":"search","arguments":{"q":"bug"}}</tool_call>'
    assert tokenizer.decode(mine[0].completion_token_ids) == tool_call
    assert tokenizer.decode(mine[1].completion_token_ids) == "fixed line 3"
    assert tokenizer.decode(mine[1].prompt_token_ids).endswith("tool call_1: found it in app.py line 3 assistant:")
    assert all(c.origin == "import:openai-chat" and not c.completion_logprobs for c in calls)

    flat = [e for e in events if e.session_id != "conv-1"]
    texts = [e.user_message.text for e in flat if e.HasField("user_message")]
    assert texts == ["mail [REDACTED:email] the fix"]
    flat_call = next(c for c in calls if c.session_id != "conv-1")
    assert "bob@example.com" not in tokenizer.decode(flat_call.prompt_token_ids)
    assert "[REDACTED:email]" in tokenizer.decode(flat_call.prompt_token_ids)
    assert Counter(e.session_id for e in events)["conv-1"] == 5


def test_an_id_with_control_characters_is_skipped_as_capture_refuses_it(fresh_topics, tmp_path):
    """`liverl import` runs capture's own content rules (ingest/validation.py check_content) on every session."""
    answer = {"created": 1767225600, "model": "m",
              "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    lines = [{"session_id": session, "request": {"model": "m", "messages": [{"role": "user", "content": "go"}]},
              "response": answer} for session in ("conv-ok", "conv\x07bell")]
    log = tmp_path / "calls.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    tokenizer_dir = make_tokenizer_dir(tmp_path / "tok", source_words("openai-chat", [log]))
    code, out = run_import(fresh_topics, ["--format", "openai-chat", "--tenant", "acme", "--tokenizer",
                                          str(tokenizer_dir), "--dry-run", str(log)])
    assert code == 0, out
    assert "imported 1 sessions" in out and "skipped 1 (unbuildable_session: 1)" in out, out
    assert "session_id must be printable" in out
