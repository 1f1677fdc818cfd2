"""`liverl import` of a forgotten user's file again: nothing is published, and the summary says so truthfully."""

from __future__ import annotations

import json

from infra.commands.forget import forget
from tests.ingest.importers.conftest import make_tokenizer_dir, run_import, source_words
from tests.ingest.test_subjects_at_rest import raw_topic

USER = "frida-3310"


def test_reimporting_a_forgotten_users_sessions_imports_none_and_counts_them_dropped(fresh_topics, tmp_path):
    config = fresh_topics.model_copy(deep=True)
    config.privacy.keys_dir = tmp_path / "keys"
    config.privacy.audit_log = tmp_path / "audit.jsonl"
    config.ingest.spool_dir = tmp_path / "capture-spool"
    config.table.trajectories_uri = str(tmp_path / "trajectories")
    config.table.dead_letters_uri = str(tmp_path / "dead-letters")
    request = {"model": "m", "messages": [{"role": "user", "content": "fix it"}], "user": USER,
               "metadata": {"session_id": "conv-frida"}}
    log = tmp_path / "calls.jsonl"
    log.write_text(json.dumps({"request": request, "response": {"created": 1767225600, "choices": [
        {"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}}) + "\n")
    tokenizer = make_tokenizer_dir(tmp_path / "tok", source_words("openai-chat", [log]))
    argv = ["--format", "openai-chat", "--tenant", "acme", "--tokenizer", str(tokenizer),
            "--spool-dir", str(tmp_path / "spool"), str(log)]
    code, out = run_import(config, argv)
    assert code == 0 and "imported 1 sessions" in out and "forgotten" not in out, out
    published = len(raw_topic(config, config.kafka.session_events_topic, want=2))

    forget(config, "acme", user=USER)
    code, out = run_import(config, argv)
    assert code == 0, out
    assert "imported 0 sessions (0 events, 0 model calls" in out, out
    assert "dropped 1 sessions forgotten by `liverl forget`" in out, out
    assert published and len(raw_topic(config, config.kafka.session_events_topic, want=published + 1)) == published
