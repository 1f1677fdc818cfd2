"""ingest.opt_out_users at the entries besides the SDK's: OTLP spans and `liverl import` of an opted-out user are
dropped and counted before anything of them (events or model calls) reaches Kafka; other users' go through."""

from __future__ import annotations

import json
import time

import httpx

from liverl.privacy import key_store
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.v1 import model_call_pb2, session_event_pb2
from tests.ingest.conftest import capture_config, events_of, read_topic
from tests.ingest.importers.conftest import make_tokenizer_dir, messages_of, run_import, source_words
from tests.ingest.test_otlp_endpoint import ACME, _attribute, _chat, _request

PRIVATE = "private-user@example.com"


def _as_user(span: dict, user: str) -> dict:
    span["attributes"].append(_attribute("user.id", user))
    return span


def test_otlp_spans_of_an_opted_out_user_are_dropped_with_their_model_calls(fresh_topics, tmp_path, tiny_policy_dir):
    from ingest.service import CaptureServer

    config = capture_config(fresh_topics, tmp_path / "spool", opt_out_users={"acme": [PRIVATE]})
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    server = CaptureServer(config).start()
    try:
        now = time.time()
        document = _request(_as_user(_chat("01" * 8, now - 3, "private words", conversation="conv-private"), PRIVATE),
                            _as_user(_chat("02" * 8, now - 2, "more private", conversation="conv-private"), PRIVATE),
                            _as_user(_chat("03" * 8, now - 1, "public words", conversation="conv-public"), "bob"))
        answer = httpx.post(f"http://{server.http_address}/v1/traces", json=document, headers=ACME)
        assert answer.status_code == 200 and answer.json() == {}  # dropped by choice, not refused

        calls = messages_of(read_topic(config, config.kafka.model_calls_topic, want=2, timeout_s=5),
                            model_call_pb2.ModelCall)
        assert [c.session_id for c in calls] == ["conv-public"]
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=10, timeout_s=3))
        assert {e.session_id for e in events} == {"conv-public"}
        assert {e.user_id for e in events} == {server.core.subjects.pseudonyms.user("acme", "bob")}  # keyed
        assert server.metrics.registry.get_sample_value("liverl_ingest_events_dropped_total",
                                                        {"reason": "opt_out"}) == 2  # one per span
    finally:
        server.stop()


def _line(session: str, text: str, user: str | None) -> str:
    request = {"model": "m", "messages": [{"role": "user", "content": text}], "metadata": {"session_id": session}}
    if user is not None:
        request["user"] = user
    return json.dumps({"request": request, "response": {"created": 1767225600, "choices": [
        {"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}})


def test_import_drops_the_sessions_of_opted_out_users_named_by_the_log_or_by_user(fresh_topics, tmp_path):
    config = fresh_topics.model_copy(deep=True)
    config.ingest.opt_out_users = {"acme": [PRIVATE, "carol"]}
    log = tmp_path / "calls.jsonl"
    log.write_text("\n".join([_line("conv-private", "secret plans", PRIVATE), _line("conv-bob", "fix it", "bob"),
                              _line("conv-anyone", "hello there", None)]) + "\n")
    tokenizer = make_tokenizer_dir(tmp_path / "tok", source_words("openai-chat", [log]))
    argv = ["--format", "openai-chat", "--tenant", "acme", "--tokenizer", str(tokenizer),
            "--spool-dir", str(tmp_path / "spool"), str(log)]

    code, out = run_import(config, argv)
    assert code == 0, out
    assert "imported 2 sessions" in out and "dropped 1 sessions of opted-out users" in out
    events = messages_of(read_topic(config, config.kafka.session_events_topic, want=20, timeout_s=5),
                         session_event_pb2.SessionEvent)
    calls = messages_of(read_topic(config, config.kafka.model_calls_topic, want=5, timeout_s=2),
                        model_call_pb2.ModelCall)
    assert {e.session_id for e in events} == {c.session_id for c in calls} == {"conv-bob", "conv-anyone"}
    bob = Pseudonyms(key_store(config)).user("acme", "bob")
    assert {e.user_id for e in events if e.session_id == "conv-bob"} == {bob}  # keyed, never as given

    # --user names the user of the sessions the log does not: carol opted out, so only bob's session remains
    code, out = run_import(config, ["--user", "carol", "--dry-run", *argv])
    assert code == 0 and "imported 1 sessions" in out and "dropped 2 sessions of opted-out users" in out, out
