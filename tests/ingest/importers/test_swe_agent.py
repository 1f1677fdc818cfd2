"""`liverl import --format swe-agent` on three real SWE-agent runs, through the real broker."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from tests.conftest import stored_key, with_topics
from tests.ingest.conftest import read_topic
from tests.ingest.importers.conftest import make_tokenizer_dir, messages_of, run_import, source_words

TENANT = "acme"


@pytest.fixture(scope="module")
def imported(stack, traj_paths, tmp_path_factory):
    """The three runs imported once into topics of this module: (config, argv, stdout, events, calls, tokenizer)."""
    from transformers import AutoTokenizer

    from liverl.v1 import model_call_pb2, session_event_pb2

    config = with_topics(stack, f"swe-import-{uuid.uuid4().hex[:8]}")
    tokenizer_dir = make_tokenizer_dir(tmp_path_factory.mktemp("tokenizer"), source_words("swe-agent", traj_paths))
    argv = ["--format", "swe-agent", "--tenant", TENANT, "--tokenizer", str(tokenizer_dir),
            "--spool-dir", str(tmp_path_factory.mktemp("spool")), *map(str, traj_paths)]
    code, out = run_import(config, argv)
    assert code == 0, out
    events = read_topic(config, config.kafka.session_events_topic, want=50)
    calls = read_topic(config, config.kafka.model_calls_topic, want=20)
    return (config, argv, out, events, calls, AutoTokenizer.from_pretrained(tokenizer_dir),
            messages_of(events, session_event_pb2.SessionEvent), messages_of(calls, model_call_pb2.ModelCall))


def sessions_by_file(events) -> dict[str, str]:
    return {e.session_start.attributes["source_file"]: e.session_id for e in events if e.HasField("session_start")}


def test_every_turn_of_every_run_is_published(imported, traj_paths):
    _, _, out, _, _, _, events, calls = imported
    assert "imported 3 sessions" in out and "skipped 0" in out
    session_of = sessions_by_file(events)
    for path in traj_paths:
        run = json.loads(path.read_text())
        history = run["history"]
        session = session_of[path.name]
        kinds = Counter(e.WhichOneof("body") for e in events if e.session_id == session)
        turns = [m for m in history if m["role"] == "assistant"]
        observations = [m for i, m in enumerate(history) if m["role"] == "tool" or (
            m["role"] == "user" and i > 0 and history[i - 1]["role"] == "assistant")]
        assert len([c for c in calls if c.session_id == session]) == len(turns)
        if "trajectory" in run:
            assert len(run["trajectory"]) == len(turns)
        assert kinds["tool_call"] == len([m for m in turns if m.get("action")])
        assert kinds["tool_result"] == len(observations)
        assert kinds["user_message"] == 1  # the task; every later user-role message is an observation
        assert kinds["session_start"] == kinds["session_end"] == 1
        sequences = [e.sequence for e in events if e.session_id == session]
        assert sorted(sequences) == list(range(len(sequences)))


def test_calls_are_off_policy_imports_keyed_by_tenant_and_session(imported):
    config, _, _, event_records, call_records, _, events, calls = imported
    for call in calls:
        assert call.origin == "import:swe-agent" and call.policy_version == "import"
        assert not call.completion_logprobs and call.completion_token_ids and call.prompt_token_ids
        assert call.agent_role == 1 and call.tenant_id == TENANT  # AGENT_ROLE_SINGLE
    for record, message in [*zip(event_records, events), *zip(call_records, calls)]:
        assert record.key == stored_key(config, TENANT, message.session_id)
        assert dict(record.headers)["liverl-tenant"] == TENANT.encode()
    # every tool call names the model call that made it, and every result a call of its session
    request_ids = {c.request_id for c in calls}
    call_ids = {(e.session_id, e.tool_call.call_id) for e in events if e.HasField("tool_call")}
    assert all(e.tool_call.request_id in request_ids for e in events if e.HasField("tool_call"))
    assert all((e.session_id, e.tool_result.call_id) in call_ids for e in events if e.HasField("tool_result"))


def test_token_ids_decode_to_the_redacted_text(imported, traj_paths):
    from ingest.importers.chat import completion_text, tool_calls_of
    from liverl.redaction import Redactor

    _, _, _, _, _, tokenizer, events, calls = imported
    redactor = Redactor()
    session_of = sessions_by_file(events)
    for path in traj_paths:
        turns = [m for m in json.loads(path.read_text())["history"] if m["role"] == "assistant"]
        mine = sorted((c for c in calls if c.session_id == session_of[path.name]), key=lambda c: c.request_time_ms)
        for turn, call in zip(turns, mine, strict=True):
            calls_in_text = not turn.get("tool_calls")
            text = turn["content"] if calls_in_text else completion_text(turn["content"], tool_calls_of(turn, "x"))
            expected = " ".join(redactor.redact_text(text).split())
            assert tokenizer.decode(call.completion_token_ids) == expected
            assert tokenizer.decode(call.prompt_token_ids).endswith("assistant:")
    ctf = [c for c in calls if c.session_id == session_of["ctf-networking_1.traj"]]
    prompts = " ".join(tokenizer.decode(c.prompt_token_ids) for c in ctf)
    assert "[REDACTED:env_secret]" in prompts and "Password: flag{" not in prompts


def test_outcome_carries_the_runs_result(imported):
    _, _, _, _, _, _, events, _ = imported
    session_of = sessions_by_file(events)
    outcomes = {e.session_id: e.outcome for e in events if e.HasField("outcome")}
    fix = outcomes[session_of["marshmallow-1867.function_calling.traj"]]
    assert fix.success and fix.score == 1.0
    assert "exit_status=submitted" in fix.detail and "diff --git a/src/marshmallow/fields.py" in fix.detail
    assert fix.metrics["swe_agent.api_calls"] == 11
    flag = outcomes[session_of["ctf-networking_1.traj"]]
    assert flag.success and "flag{d316759c281bf925d600be698a4973d5}" in flag.detail
    assert session_of["function_calling_simple.traj"] not in outcomes  # no `info`: no outcome is invented


def test_reimport_publishes_the_same_event_ids(imported):
    config, argv, _, first_events, first_calls, _, _, _ = imported
    code, out = run_import(config, argv)
    assert code == 0, out
    events = read_topic(config, config.kafka.session_events_topic, want=2 * len(first_events))
    calls = read_topic(config, config.kafka.model_calls_topic, want=2 * len(first_calls))
    from liverl.v1 import model_call_pb2, session_event_pb2

    event_ids = Counter(m.event_id for m in messages_of(events, session_event_pb2.SessionEvent))
    call_ids = Counter(m.event_id for m in messages_of(calls, model_call_pb2.ModelCall))
    assert len(event_ids) == len(first_events) and set(event_ids.values()) == {2}
    assert len(call_ids) == len(first_calls) and set(call_ids.values()) == {2}


def test_unreadable_traces_are_reported_and_counted(fresh_topics, traj_paths, tmp_path):
    broken = tmp_path / "broken.traj"
    broken.write_text('{"history": [')
    other = tmp_path / "other.traj"
    other.write_text(json.dumps({"messages": []}))
    tokenizer_dir = make_tokenizer_dir(tmp_path / "tok", ["fix"])
    code, out = run_import(fresh_topics, ["--format", "swe-agent", "--tenant", TENANT, "--tokenizer",
                                          str(tokenizer_dir), "--spool-dir", str(tmp_path / "spool"),
                                          str(broken), str(traj_paths[0]), str(other), str(tmp_path / "missing.traj")])
    assert code == 0
    assert f"skipped {broken}: invalid_json" in out and f"skipped {other}: no_history" in out
    assert "not_a_file" in out
    assert "imported 1 sessions" in out and "skipped 3 (invalid_json: 1, no_history: 1, not_a_file: 1)" in out
