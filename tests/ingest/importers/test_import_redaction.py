"""`liverl import` redacts everything it renders into a prompt (tool definitions, keys inside tool-call
arguments, tool call ids) and keys its records by the pseudonymised session id the records carry."""

from __future__ import annotations

import json

from ingest.importers.build import SessionBuilder
from ingest.importers.chat import render_prompt
from ingest.importers.model import Exchange, ImportedSession
from ingest.importers.publish import records_of
from liverl.config.kafka import KafkaConfig
from liverl.contracts.keys import session_key
from liverl.redaction import Redactor
from tests.ingest.importers.conftest import make_tokenizer_dir

PERSONAL = ("dave@example.com", "AKIAIOSFODNN7EXAMPLE", "4111111111111111")
TOOLS = [{"type": "function", "function": {"name": "pay", "description": f"signs with {PERSONAL[1]}",
                                           "parameters": {"type": "object",
                                                          "properties": {PERSONAL[0]: {"type": "string"}}}}}]
CALL = {"id": f"call-{PERSONAL[0]}", "type": "function",
        "function": {"name": "pay", "arguments": {PERSONAL[0]: "now", "card": "ok"}}}
MESSAGES = [{"role": "user", "content": "pay it"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": CALL["id"], "content": "paid"}, {"role": "user", "content": "thanks"}]


def _session() -> ImportedSession:
    exchange = Exchange(source_id="x1", messages=MESSAGES, completion="done", tools=TOOLS, time_ms=1_767_225_600_000)
    return ImportedSession(source="log.jsonl:1", identity="i1", session_id=f"conv-{PERSONAL[0]}",
                           task_family="coding", items=[exchange])


def test_the_prompt_events_and_keys_of_an_import_hold_no_personal_data(tmp_path):
    from transformers import AutoTokenizer

    raw_prompt = render_prompt(None, MESSAGES, TOOLS)
    assert all(value in raw_prompt for value in PERSONAL[:2])
    words = set(raw_prompt.split()) | {"done", "assistant:"}
    tokenizer = AutoTokenizer.from_pretrained(str(make_tokenizer_dir(tmp_path / "tok", words)))
    personal_ids = {tokenizer.convert_tokens_to_ids(word) for word in words if any(v in word for v in PERSONAL)}
    assert personal_ids and tokenizer.unk_token_id not in personal_ids

    built = SessionBuilder("acme", "openai-chat", tokenizer, Redactor(tenant="acme"), 0).build(_session())
    (call,) = built.calls
    assert len(call.prompt_token_ids) > 5
    assert not personal_ids & set(call.prompt_token_ids), "the prompt renders personal data"
    for message in [*built.events, *built.calls]:
        assert not any(value.encode() in message.SerializeToString() for value in PERSONAL), message
    results = [e for e in built.events if e.WhichOneof("body") == "tool_result"]
    assert results and results[0].tool_result.call_id.startswith("redacted-email-")

    records = records_of(built, "acme", KafkaConfig())
    assert {r.key for r in records} == {session_key("acme", built.events[0].session_id)}
    assert built.events[0].session_id.startswith("redacted-email-")
    assert not any(PERSONAL[0].encode() in r.key for r in records)
    assert json.dumps([r.key.decode() for r in records]).count("redacted-email-") == len(records)
