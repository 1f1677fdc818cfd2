"""A user serving alone saw is erasable: each recorded call's user (x-liverl-user-id or OpenAI's `user`) is linked,
as its keyed pseudonym, to the session its records are sealed under, so `liverl forget --user` finds the session;
a forgotten user's calls are served and not recorded; a key store that cannot be written never fails a request."""

from __future__ import annotations

import time

import grpc
import openai

from liverl.contracts import names
from liverl.privacy import key_store
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.subject import resolve
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from serving.metrics import ServingMetrics
from serving.recording.recorder import Recorder
from serving.recording.subjects import ServingSubjects
from tests.serving.conftest import ServerThread, module_topics, read_topic, register_version, serving_config


def _sealed_subject(record) -> str:
    return next(value.decode() for name, value in record.headers if name == names.HEADER_SEALED)


def test_a_user_named_to_serving_is_linked_to_the_session_forget_user_finds(stack, tiny_policy_dir, tmp_path):
    config = module_topics(stack, f"subjects-{tmp_path.name}")
    config = serving_config(config, tmp_path, f"subjects-{tmp_path.name}", api_keys={"acme-key": {"tenant": "acme"}})
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    alice, bob = f"alice-{tmp_path.name}@example.com", f"bob-{tmp_path.name}"
    ask = [{"role": "user", "content": "fix the file"}]
    with ServerThread(config) as server:
        acme = openai.OpenAI(base_url=server.http_base + "/v1", api_key="acme-key", max_retries=0)
        by_body = acme.chat.completions.create(model="", messages=ask, max_tokens=2, user=alice)  # session: the user
        by_header = acme.with_options(default_headers={names.META_USER_ID: alice,
                                                       names.META_SESSION_ID: f"work-{tmp_path.name}"}
                                      ).completions.create(model="", prompt="search file", max_tokens=2)
        acme.chat.completions.create(model="", messages=ask, max_tokens=2, user=bob)
        with grpc.insecure_channel(server.grpc_target) as channel:  # gRPC names the user in its metadata
            by_grpc = serving_pb2_grpc.PolicyServiceStub(channel).Generate(
                serving_pb2.GenerateRequest(prompt="fix the file", session_id=f"grpc-{tmp_path.name}",
                                            sampling=common_pb2.SamplingParams(max_tokens=2)),
                metadata=(("authorization", "Bearer acme-key"), (names.META_USER_ID, alice)))
        assert server.server.recorder.flush(30)
        records = read_topic(config, config.kafka.model_calls_topic, expect=4)
        calls = {model_call_pb2.ModelCall.FromString(r.value).request_id: r for r in records}
        alices = {_sealed_subject(calls[reply.id]) for reply in (by_body, by_header)}
        alices.add(_sealed_subject(calls[by_grpc.request_id]))

        store = key_store(config)
        found = resolve(store, "acme", user=alice)  # what `liverl forget --user` erases
        assert found.sessions == alices and len(alices) == 3
        # OpenAI's `user` names the session by the user's keyed pseudonym, and no Kafka key holds an id as given
        assert model_call_pb2.ModelCall.FromString(calls[by_body.id].value).session_id == found.user
        assert all(alice.encode() not in r.key and b"work-" not in r.key for r in records)
        assert server.server.metrics.value("liverl_serving_user_links_total", {"outcome": "linked"}) == 4
        stored = b"".join(path.read_bytes() for path in config.privacy.keys_dir.rglob("*") if path.is_file())
        assert alice.encode() not in stored and bob.encode() not in stored  # pseudonyms only

        store.forget("acme", sorted(found.sessions), found.user)
        again = acme.chat.completions.create(model="", messages=ask, max_tokens=2, user=alice)
        assert again.choices  # served all the same, never recorded
        assert server.server.recorder.flush(30)
        assert server.server.metrics.value("liverl_serving_records_total", {"outcome": "forgotten"}) == 1
    assert resolve(key_store(config), "acme", user=bob).sessions  # another user's link is intact


class _ReadOnlyKeyStore(FileKeyStore):
    """A key store whose writes fail (a full disk, a KMS outage)."""

    def create_many(self, tenant, subjects, links=()):
        raise OSError("no space left on device")


def test_a_failed_link_write_is_counted_and_the_call_still_recorded(fresh_topics, tmp_path):
    store = _ReadOnlyKeyStore(tmp_path / "keys")
    metrics = ServingMetrics()
    recorder = Recorder(fresh_topics.kafka, tmp_path / "spool", metrics,
                        subjects=ServingSubjects(store, Pseudonyms(store))).start()
    call = model_call_pb2.ModelCall(event_id="e1", request_id="r1", session_id="s1", tenant_id="demo",
                                    schema_version=names.EVENT_SCHEMA_VERSION, policy_version="7",
                                    completion_token_ids=[5, 6], completion_logprobs=[-1.0, -2.0])
    try:
        recorder.record_later(lambda: call, int(time.time() * 1000), "carol@example.com")
        records = read_topic(fresh_topics, fresh_topics.kafka.model_calls_topic, expect=1)
    finally:
        recorder.close()
    assert [model_call_pb2.ModelCall.FromString(r.value).request_id for r in records] == ["r1"]
    assert metrics.value("liverl_serving_user_links_total", {"outcome": "failed"}) == 1
    assert metrics.value("liverl_serving_user_links_total", {"outcome": "linked"}) == 0
