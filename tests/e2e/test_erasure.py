"""Erasure, proven black-box on the real stack: one user's marker strings, ids and token ids go in through every
entry point (the SDK, OTLP, `liverl import`, an OpenAI call through serving with no liverl header, one naming the
user in OpenAI's `user` field, and a capture event refused for clock skew), are distilled into the table, traced
and sampled in MLflow and trained on (a registered version); bad `liverl forget` requests are refused with nothing
lost; then `liverl forget` runs, and no byte under the data directory holds the user's text, raw user id, session
ids or token ids in any encoding (raw, base64, hex, inside gzip, zlib, zstd or snappy streams, every Parquet
column: tests/e2e/byte_scan.py), the erasure names the version trained on the user's rows and keeps it from
promotion, and another user of the same tenant and a user of another tenant are intact and still read by the
trainer's table reader. Finally a whole tenant is erased with --all.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import stack_config
from tests.ingest.conftest import events_of

pytestmark = pytest.mark.slow

DAVE, ERIN, CAROL = "dave@example.com", "erin-22", "carol-globex-7"
DAVE_MARKERS = {"sdk": "pangolin-sdk-5521", "otlp": "pangolin-otlp-5522", "import": "pangolin-import-5523",
                "refused": "pangolin-refused-5524"}
ERIN_MARKER, CAROL_MARKER = "wombat-erin-8831", "quokka-carol-9941"
OTLP_CONVERSATION = "conv-dave-otlp"
DAVE_TOKENS = [5, 3, 5, 3, 2, 4, 1, 5, 2, 2, 3]  # a run of the tiny vocabulary's ids nobody else sends
TOKENS = {"acme": "acme-token", "globex": "globex-token"}


@pytest.fixture(scope="module")
def loop(tmp_path_factory, tiny_policy_dir):
    """The embedded stack on disk storage, a capture service, and a distiller with audit traces, all under one
    data directory."""
    from infra.embedded.stack import down, up
    from ingest.service import CaptureServer
    from liverl.io.processes import free_port

    data_dir = tmp_path_factory.mktemp("erasure")
    config = stack_config(data_dir, storage="disk")
    config.ingest.grpc_port, config.ingest.http_port, config.ingest.metrics_port = free_port(), free_port(), 0
    config.ingest.tenant_tokens = dict(TOKENS)
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    config.pipelines.reward_horizon_s = 0.0
    config.pipelines.idle_timeout_s = 1.0
    config.pipelines.read_timeout_s = 20.0
    config.pipelines.audit = True
    config.pipelines.trace_sample_rate = 1.0
    up(config, say=lambda *_: None)
    server = CaptureServer(config).start()
    try:
        yield config, server
    finally:
        server.stop()
        down(config, say=lambda *_: None)


def sdk_session(config, server, user: str, marker: str, tokens: list[int], tenant: str = "acme") -> str:
    """A session through the SDK with one model call, sealed and sent as serving's recorder sends it."""
    from ingest.sdk import CaptureClient
    from liverl.contracts import names
    from liverl.contracts.keys import session_key
    from liverl.io.kafka_writer import KafkaWriter, Record
    from liverl.io.spool import Spool
    from liverl.privacy import sealer_for
    from liverl.v1 import common_pb2, model_call_pb2

    client = CaptureClient(server.grpc_address, TOKENS[tenant], None)
    session = client.start_session(task_family="coding", task_id="t-1", user_id=user,
                                   session_id=f"conv-{user.split('@')[0]}-{uuid.uuid4().hex[:8]}")
    session.user_message(f"please fix {marker} in parser.py")
    now = int(time.time() * 1000)
    call = model_call_pb2.ModelCall(
        event_id=f"c-{session.session_id}", request_id=f"r-{session.session_id}", session_id=session.session_id,
        tenant_id=tenant, schema_version=names.EVENT_SCHEMA_VERSION, agent_role=common_pb2.AGENT_ROLE_SINGLE,
        agent_id="main", policy_version="1", model_name="liverl-policy", prompt_token_ids=tokens,
        completion_token_ids=[3, 4], completion_logprobs=[-0.5, -0.5], request_time_ms=now,
        first_token_time_ms=now + 5, finish_time_ms=now + 10, finish_reason="stop", api="openai-chat",
        sampling=common_pb2.SamplingParams(temperature=1.0, top_p=1.0, max_tokens=8))
    sealer = sealer_for(config)
    writer = KafkaWriter(config.kafka, Spool(config.stack.data_dir / "serving" / "spool"), 10.0,
                         seal=sealer.seal_all if sealer else None).start()
    writer.write([Record(config.kafka.model_calls_topic, session_key(tenant, session.session_id),
                         call.SerializeToString(), ((names.HEADER_TENANT, tenant.encode()),), now)])
    writer.close()
    session.tool_result(session.tool_call("edit", json.dumps({"note": marker}), request_id=call.request_id), "ok")
    session.outcome(success=True, score=1.0, detail=f"fixed {marker}")
    session.end("completed")
    assert client.flush(timeout_s=30), client.stats()
    client.close()
    return session.session_id


def otlp_conversation(server, conversation: str, marker: str) -> None:
    now = time.time()

    def attribute(key: str, value) -> dict:
        return {"key": key, "value": {"doubleValue": value} if isinstance(value, float) else {"stringValue": value}}

    def span(span_id: str, start_s: float, attributes: dict) -> dict:
        return {"traceId": "cd" * 16, "spanId": span_id, "name": attributes["gen_ai.operation.name"],
                "startTimeUnixNano": str(int(start_s * 1e9)), "endTimeUnixNano": str(int((start_s + 0.5) * 1e9)),
                "attributes": [attribute(k, v) for k, v in {**attributes,
                                                             "gen_ai.conversation.id": conversation}.items()]}

    messages = [{"role": "user", "parts": [{"type": "text", "content": f"look up {marker} please"}]}]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": f"found {marker}"}], "finish_reason": "stop"}]
    document = {"resourceSpans": [{"resource": {"attributes": [attribute("service.name", "agent")]},
                                   "scopeSpans": [{"scope": {"name": "genai"}, "spans": [
                                       span("0a" * 8, now - 3, {"gen_ai.operation.name": "chat",
                                                                "gen_ai.request.model": "m",
                                                                "gen_ai.request.temperature": 0.7,
                                                                "gen_ai.input.messages": json.dumps(messages),
                                                                "gen_ai.output.messages": json.dumps(answer)})]}]}]}
    reply = httpx.post(f"http://{server.http_address}/v1/traces", json=document,
                       headers={"authorization": "Bearer acme-token"})
    assert reply.status_code == 200, reply.text


def import_log(config, tmp_path: Path, tokenizer_dir: Path, user: str, marker: str, imported: int = 1) -> str:
    import argparse
    import contextlib
    import io

    from ingest import import_cli

    log = tmp_path / "chat.jsonl"
    line = {"request": {"model": "m", "messages": [{"role": "user", "content": f"summarise {marker} for me"}],
                        "metadata": {"session_id": "conv-import-dave", "task_family": "coding"}},
            "response": {"id": "chatcmpl-9", "created": int(time.time()) - 60, "model": "m",
                         "choices": [{"message": {"role": "assistant", "content": f"{marker} summarised"},
                                      "finish_reason": "stop"}]}}
    log.write_text(json.dumps(line) + "\n")
    parser = argparse.ArgumentParser()
    import_cli.add_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = import_cli.run(config, parser.parse_args(
            ["--format", "openai-chat", "--tenant", "acme", "--user", user, "--tokenizer", str(tokenizer_dir),
             str(log)]))
    assert code == 0 and f"imported {imported} sessions" in out.getvalue(), out.getvalue()
    return "conv-import-dave"


def serving_calls(config, tiny_policy_dir, tmp_path: Path, capture_server, user: str, text: str) -> tuple[str, str]:
    """Two OpenAI chat calls through serving (hf engine), as an unmodified agent makes them: one with no liverl
    header, then the user's thumbs-up on its reply through the SDK; one naming the user in OpenAI's `user` field.
    Returns the session ids serving recorded them under (the first reply's id; the user's pseudonym)."""
    from openai import OpenAI

    from ingest.sdk import CaptureClient, FeedbackKind
    from tests.serving.conftest import ServerThread, serving_config

    served = serving_config(config, tmp_path, "liverl-policy", policy_dir=tiny_policy_dir,
                            api_keys={"acme-key": {"tenant": "acme"}}, default_max_tokens=4)
    with ServerThread(served) as serving:
        llm = OpenAI(base_url=f"{serving.http_base}/v1", api_key="acme-key")
        reply = llm.chat.completions.create(model="liverl-policy", messages=[{"role": "user", "content": text}])
        named = llm.chat.completions.create(model="liverl-policy", messages=[{"role": "user", "content": text}],
                                            user=user)
        assert serving.server.recorder.flush(30)
    client = CaptureClient(capture_server.grpc_address, "acme-token", None)
    client.feedback(reply, FeedbackKind.THUMBS_UP, user_id=user)
    assert client.flush(timeout_s=30), client.stats()
    client.close()
    by_user = named.model_extra["liverl"]["session_id"]
    assert by_user.startswith("u-") and user not in by_user  # the user field names the session by its pseudonym
    return reply.id, by_user


def refused_event(server, user: str, session: str, marker: str) -> None:
    """A capture event of the user that is refused (a clock a day ahead): it is dead-lettered, not stored."""
    event = {"eventId": f"e-{session}", "sessionId": session, "userId": user, "schemaVersion": 1,
             "eventTimeMs": int(time.time() * 1000) + 86_400_000, "userMessage": {"text": f"urgent {marker}"}}
    answer = httpx.post(f"http://{server.http_address}/v1/capture", json={"events": [event]},
                        headers={"authorization": "Bearer acme-token"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["rejected"][0]["reason"] == "clock_skew", answer.text


def read_topic(config, topic: str, want: int) -> list:
    """Every record of the topic, opened where its key still exists (erased ones are left out)."""
    from kafka import KafkaConsumer, TopicPartition

    from liverl.privacy import opener_for
    from liverl.privacy.sealing import Forgotten

    opener = opener_for(config)
    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []])
        consumer.seek_to_beginning()
        records = []
        for _ in range(10):
            polled = [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
            records += polled
            if not polled and len(records) >= want:
                break
    finally:
        consumer.close()
    opened = []
    for record in records:
        try:
            opened.append(record._replace(value=opener.open(record.topic, record.key, record.headers, record.value)))
        except Forgotten:
            continue
    return opened


def train_once(config, policy_dir: Path) -> str:
    """policy_dir registered as the base version, then one pass of the trainer over the table; the version it
    registered."""
    from trainer.io.base_policy import register_base
    from trainer.io.registry import Registry
    from trainer.loop import Trainer

    config.trainer.gate.enabled = False  # the version only has to exist, trained on these rows
    config.trainer.gate.holdout_fraction = 0.0
    config.trainer.checkpoint_dir = config.stack.data_dir / "checkpoints"
    base = register_base(config, policy_dir, say=lambda *_: None)
    trainer = Trainer(config, say=lambda *_: None)
    trainer.start()
    try:
        assert trainer.run(follow=False) >= 1
    finally:
        trainer.close()
    return max((mv.version for mv in Registry(config.mlflow).versions() if mv.version != base), key=int)


def forget_command(config, *args: str, code: int = 0) -> dict | str:
    """`liverl forget` run as a user runs it, in its own process, handed this config: its printed summary (or,
    when it is expected to refuse with `code`, what it said)."""
    import os
    import subprocess
    import sys

    from demo.stage_env import config_environment

    done = subprocess.run([sys.executable, "-m", "liverl.cli", "forget", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **config_environment(config)})
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1]) if code == 0 else done.stderr


def distill_until_settled(config) -> None:
    from pipelines.distill import distill_once

    for _ in range(3):  # sessions closed by idleness need a batch clock past their timeout
        distill_once(config, now_ms=int(time.time() * 1000) + 3_600_000)


def table_sessions(config) -> set[tuple[str, str]]:
    """(tenant, session id) of every row the trainer's table reader reads."""
    from liverl.io.table_history import TableHistory

    return {(r["tenant_id"], r["session_id"]) for r in TableHistory(config.table.trajectories_uri).rows_up_to()}


def test_forget_leaves_no_byte_of_the_user_and_keeps_everyone_else(loop, tmp_path, tiny_policy_dir):
    from infra.commands.forget import forget
    from liverl.io.table_history import TableHistory
    from liverl.privacy import audit_log, row_opener_for
    from tests.e2e.byte_scan import scan
    from tests.trainer.test_gate_promotion import Judged
    from trainer.io.registry import Registry

    config, server = loop
    data_dir = config.stack.data_dir
    dave_sdk = sdk_session(config, server, DAVE, DAVE_MARKERS["sdk"], DAVE_TOKENS)
    erin_session = sdk_session(config, server, ERIN, ERIN_MARKER, [1, 2])
    carol_session = sdk_session(config, server, CAROL, CAROL_MARKER, [1, 2], tenant="globex")
    otlp_conversation(server, OTLP_CONVERSATION, DAVE_MARKERS["otlp"])
    dave_import = import_log(config, tmp_path, tiny_policy_dir, DAVE, DAVE_MARKERS["import"])
    zero_code, by_user = serving_calls(config, tiny_policy_dir, tmp_path, server, DAVE, "fix edit file")
    refused_event(server, DAVE, "conv-dave-refused", DAVE_MARKERS["refused"])
    distill_until_settled(config)

    dave_sessions = [dave_sdk, dave_import, zero_code, OTLP_CONVERSATION, "conv-dave-refused"]
    everyone = {("acme", erin_session), ("globex", carol_session), ("acme", OTLP_CONVERSATION),
                ("acme", dave_import), ("acme", zero_code)}  # the `user`-named call has no reward signal: no row
    assert everyone <= table_sessions(config), table_sessions(config)
    before = scan(data_dir, [*DAVE_MARKERS.values(), *dave_sessions], [DAVE_TOKENS])
    assert {f.needle for f in before} >= {DAVE_MARKERS["sdk"], DAVE_MARKERS["otlp"], DAVE_MARKERS["import"]}, before
    print(f"copies of dave's markers and ids before forget: {len(before)} in {len({f.path for f in before})} files")
    assert not scan(data_dir, [DAVE]), "a raw user id was stored"  # never, not even before the erasure
    assert not scan(data_dir / "broker-s3", [erin_session, dave_sdk])  # Kafka keys: pseudonyms, values: sealed
    assert scan(data_dir / "mlflow", [ERIN_MARKER]) and scan(data_dir / "mlflow", [CAROL_MARKER])
    trained = train_once(config, tiny_policy_dir)

    # Every bad request is refused (exit code 2) and erases nothing
    rows_before = table_sessions(config)
    for args in (["--user", ""], ["--user", " "], ["--session", ""], ["--user", "*"], ["--session", "*"],
                 ["--user", "nobody@example.com"]):
        assert "refused, nothing was erased" in forget_command(config, "--tenant", "acme", *args, code=2)
    assert "refused" in forget_command(config, "--tenant", "globex", "--user", ERIN, code=2)  # the other tenant's
    assert "refused" in forget_command(config, "--tenant", "*", "--user", DAVE, code=2)
    assert "required" in forget_command(config, "--tenant", "acme", code=2)  # a tenant alone: --all, said out loud
    planned = forget_command(config, "--tenant", "acme", "--user", DAVE, "--dry-run")
    assert planned["dry_run"] and planned["known"] and planned["trajectory_rows"] >= 3, planned
    assert table_sessions(config) == rows_before and not audit_log.read(config.privacy.audit_log)

    started = time.perf_counter()
    by_user = forget_command(config, "--tenant", "acme", "--user", DAVE, "--exclude-versions", "--operator", "test")
    by_session = forget(config, "acme", session=OTLP_CONVERSATION, operator="test")  # OTLP names no user
    seconds = time.perf_counter() - started
    print(f"time to forget: {seconds:.2f} s (user: {by_user['seconds']} s, session: {by_session['seconds']} s)")
    print(f"erased: {json.dumps(by_user, sort_keys=True)}")
    assert by_user["trained_versions"] == by_user["versions_excluded"] == [trained]
    assert Judged(Registry(config.mlflow)).judge(trained, checkpoint=None).decision == "fail"  # never promoted
    assert by_user["table_rows"] >= 3 and by_user["traces"] >= 3
    assert by_session["keys_destroyed"] == 1 and by_session["table_rows"] >= 1

    left = scan(data_dir, [*DAVE_MARKERS.values(), *dave_sessions, DAVE], [DAVE_TOKENS])
    assert left == [], left  # in no file, in no encoding
    logged = audit_log.read(config.privacy.audit_log)
    assert [(entry["scope"], entry["status"]) for entry in logged] == [
        ("user", "started"), ("user", "done"), ("session", "started"), ("session", "done")]

    kept = TableHistory(config.table.trajectories_uri).rows_up_to()  # the trainer's reader, and its opener
    assert {(r["tenant_id"], r["session_id"]) for r in kept} == {("acme", erin_session), ("globex", carol_session)}
    assert all(row_opener_for(config).open_row(r)["token_ids"] for r in kept)
    assert scan(data_dir / "mlflow", [ERIN_MARKER]) and scan(data_dir / "mlflow", [CAROL_MARKER])  # their traces
    erin_events = [e for e in events_of(read_topic(config, config.kafka.session_events_topic, want=1))
                   if e.session_id == erin_session]  # and her records still open
    assert any(ERIN_MARKER in e.user_message.text for e in erin_events)

    # Nothing of dave comes back: his file imported again, his OTLP conversation sent again store nothing; forgetting
    # him again is harmless; a user who has not arrived yet can be opted out on purpose.
    (tmp_path / "again").mkdir()
    import_log(config, tmp_path / "again", tiny_policy_dir, DAVE, DAVE_MARKERS["import"], imported=0)
    otlp_conversation(server, OTLP_CONVERSATION, DAVE_MARKERS["otlp"])
    distill_until_settled(config)
    assert scan(data_dir, [DAVE_MARKERS["otlp"], DAVE_MARKERS["import"]]) == []
    assert table_sessions(config) == {("acme", erin_session), ("globex", carol_session)}
    again = forget_command(config, "--tenant", "acme", "--user", DAVE)
    assert again["known"] and again["table_rows"] == 0
    opted_out = forget_command(config, "--tenant", "acme", "--user", "newcomer-1", "--allow-unknown")
    assert opted_out["recorded_as_opt_out"] and opted_out["table_rows"] == 0

    # A whole tenant, said out loud: globex is gone, acme's erin is intact
    tenant = forget_command(config, "--tenant", "globex", "--all")
    assert tenant["scope"] == "tenant" and tenant["table_rows"] >= 1
    assert scan(data_dir, [CAROL_MARKER, carol_session]) == []
    assert table_sessions(config) == {("acme", erin_session)}
