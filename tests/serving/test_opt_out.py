"""ingest.opt_out_users / opt_out_tenants in serving: an opted-out user's (or tenant's) completions are served
as usual and never recorded; the user is named by x-liverl-user-id (HTTP header, gRPC metadata) or OpenAI's
`user`; every skipped record is counted."""

from __future__ import annotations

import grpc
import openai

from liverl.contracts import names
from liverl.v1 import model_call_pb2, serving_pb2, serving_pb2_grpc
from tests.serving.conftest import ServerThread, module_topics, read_topic, register_version, serving_config

PRIVATE = "private-user@example.com"


def test_calls_of_opted_out_users_and_tenants_are_served_and_never_recorded(stack, tiny_policy_dir, tmp_path):
    config = module_topics(stack, f"optout-{tmp_path.name}")
    config = serving_config(config, tmp_path, f"optout-{tmp_path.name}",
                            api_keys={"acme-key": {"tenant": "acme"}, "globex-key": {"tenant": "globex"}})
    config.ingest.opt_out_users = {"acme": [PRIVATE]}
    config.ingest.opt_out_tenants = ["globex"]
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    ask = [{"role": "user", "content": "fix the file"}]
    with ServerThread(config) as server:
        acme = openai.OpenAI(base_url=server.http_base + "/v1", api_key="acme-key", max_retries=0)
        globex = openai.OpenAI(base_url=server.http_base + "/v1", api_key="globex-key", max_retries=0)
        skipped = [
            acme.chat.completions.create(model="", messages=ask, max_tokens=2, user=PRIVATE),
            acme.with_options(default_headers={names.META_USER_ID: PRIVATE}).completions.create(
                model="", prompt="search file", max_tokens=2),
            globex.chat.completions.create(model="", messages=ask, max_tokens=2, user="anyone"),
        ]
        with grpc.insecure_channel(server.grpc_target) as channel:
            reply = serving_pb2_grpc.PolicyServiceStub(channel).Generate(
                serving_pb2.GenerateRequest(prompt="fix the file", session_id="grpc-private"),
                metadata=(("authorization", "Bearer acme-key"), (names.META_USER_ID, PRIVATE)))
        assert reply.token_ids  # served all the same
        kept = acme.chat.completions.create(model="", messages=ask, max_tokens=2, user="bob")
        server.server.recorder.flush(30)

        records = read_topic(config, config.kafka.model_calls_topic, expect=5, timeout_s=5)
        recorded = [model_call_pb2.ModelCall.FromString(r.value) for r in records]
        assert [c.request_id for c in recorded] == [kept.id]
        assert all(reply.choices for reply in skipped)
        assert server.server.metrics.registry.get_sample_value("liverl_serving_records_total",
                                                               {"outcome": "opt_out"}) == 4
