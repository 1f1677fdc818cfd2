"""Hot-swap on the real registry: alias moves, in-flight requests, smoke failures, rollbacks, canary.

Versions differ in their weights, so a record's logprobs tell which weights really produced its
tokens: every check below compares them with a plain forward pass of the version it claims.
"""

from pathlib import Path

import grpc
import pytest

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    read_topic,
    reference_logprobs,
    register_version,
    serving_config,
    set_alias,
    version_tags,
    wait_for,
)
from tests.serving.generate_load import GenerateLoad

ADMIN = (("authorization", "Bearer admin-key"),)




def _generate(stub, session, max_tokens=4, seed=0):
    request = serving_pb2.GenerateRequest(prompt_token_ids=[2, 60, 61], session_id=session,
                                          sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=max_tokens,
                                                                             seed=seed))
    return stub.Generate(request, metadata=ADMIN, timeout=60)


def _canary_places(config, sessions, canary_version):
    """The version each session gets from a second replica on the same key store (the server's sessions are placed
    by their keyed pseudonyms: one of a process's own key would agree on each session with probability 1/2)."""
    from liverl.privacy import key_store
    from liverl.privacy.pseudonyms import Pseudonyms
    from serving.router import Router, Slot

    router = Router(config.serving.canary_fraction, session_key=Pseudonyms(key_store(config)).session)
    router.champion = Slot("1", None, None, Path("."), "")
    router.canary = Slot(canary_version, None, None, Path("."), "")
    return [router.acquire(config.serving.tenant_id, session).version for session in sessions]


@pytest.fixture
def config(stack, tmp_path, request):
    name = request.node.name[:40]
    base = module_topics(stack, f"swap-{name}-{tmp_path.name}")
    # load workers must never meet the key's rate limit: a refusal is instant, so one turns into hundreds
    return serving_config(base, tmp_path, f"swap-{name}-{tmp_path.name}", admin_api_keys=["admin-key"],
                          rate_limit_per_s=1e6, rate_limit_burst=1_000_000)


def test_alias_move_swaps_under_load_without_a_failed_request(config, tiny_policy_dir, second_policy_dir):
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        # A long request in flight on version 1 across the switch.
        in_flight = stub.GenerateStream(serving_pb2.GenerateRequest(
            prompt_token_ids=[2, 60, 61], session_id="s-long",
            sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=120, seed=9)), metadata=ADMIN, timeout=120)
        first_chunk = next(in_flight)
        assert first_chunk.policy_version == "1"

        with GenerateLoad(lambda worker, i: _generate(stub, f"s-load-{worker}", seed=i + 1)) as load:
            set_alias(config, names.ALIAS_CHAMPION, register_version(config, second_policy_dir))
            wait_for(lambda: server.server.router.champion.version == "2", what="the swap to version 2")
            seen_after = len(load.responses)
            wait_for(lambda: len(load.responses) >= seen_after + 5, what="requests after the swap")
        responses, failures, workers = load.responses, load.failures, load.workers
        rest = list(in_flight)
        info = stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=ADMIN, timeout=10)

    assert failures == []
    assert {r.policy_version for r in responses} == {"1", "2"}
    # Each worker has at most one request that started before the switch and ended after it was seen.
    assert [r.policy_version for r in responses[seen_after:]].count("1") <= len(workers)
    assert {c.policy_version for c in rest} == {"1"}  # the long request finished on the version it started on
    assert info.policy_version == "2"
    assert any(line.startswith("serving swap version=2 previous=1") for line in server.lines)

    # Records name the weights that produced their tokens.
    calls = [model_call_pb2.ModelCall.FromString(r.value)
             for r in read_topic(config, config.kafka.model_calls_topic, expect=len(responses) + 1)]
    by_request = {c.request_id: c for c in calls}
    assert len(by_request) == len(responses) + 1
    long_call = next(c for c in calls if c.session_id == "s-long")
    assert long_call.policy_version == "1"
    dirs = {"1": tiny_policy_dir, "2": second_policy_dir}
    for call in [long_call] + [by_request[r.request_id] for r in (responses[0], responses[-1])]:
        tokens = list(call.completion_token_ids)
        expected = reference_logprobs(dirs[call.policy_version], list(call.prompt_token_ids), tokens)
        assert list(call.completion_logprobs) == pytest.approx(expected, abs=1e-4)
        other = reference_logprobs(dirs["2" if call.policy_version == "1" else "1"], list(call.prompt_token_ids), tokens)
        assert list(call.completion_logprobs) != pytest.approx(other, abs=1e-4)


def test_admin_rollback_and_force_swap(config, tiny_policy_dir, second_policy_dir):
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    second = register_version(config, second_policy_dir)
    config.serving.min_swap_interval_s = 3600.0  # the watcher must not undo the admin's choices
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        swapped = admin.ForceSwap(serving_pb2.SwapRequest(version=second), metadata=ADMIN, timeout=120)
        after_swap = _generate(stub, "s-admin").policy_version
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="bad answers"), metadata=ADMIN, timeout=60)
        after_rollback = _generate(stub, "s-admin").policy_version
        set_alias(config, names.ALIAS_CHAMPION, second)
        server.call(server.server.rollout.check_once())  # inside the minimum interval: no swap
        still = _generate(stub, "s-admin").policy_version
        metrics = server.server.metrics
    assert swapped.ok and swapped.policy_version == "2" and swapped.previous_version == "1"
    assert after_swap == "2"
    assert rolled.ok and rolled.policy_version == "1" and rolled.previous_version == "2"
    assert after_rollback == "1" and still == "1"
    assert "bad answers" in version_tags(config, "2")[names.TAG_SERVING_ROLLBACK]
    assert metrics.value("liverl_serving_rollbacks_total", {"reason": "admin"}) == 1


def test_version_failing_to_load_never_takes_traffic_and_is_tagged(config, tiny_policy_dir, broken_policy_dir):
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        set_alias(config, names.ALIAS_CHAMPION, register_version(config, broken_policy_dir))
        wait_for(lambda: any(line.startswith("serving swap-refused version=2") for line in server.lines),
                  what="the refusal of version 2")
        response = _generate(stub, "s-broken")
        server.call(server.server.rollout.check_once())  # a refused version is not retried
        assert server.server.router.champion.version == "1"
    assert response.policy_version == "1"
    assert "smoke-failed" in version_tags(config, "2")[names.TAG_SERVING_ROLLBACK]
    assert server.server.metrics.value("liverl_serving_swaps_total", {"outcome": "smoke_failed"}) == 1


def test_latency_breach_after_switch_rolls_back(config, tiny_policy_dir, second_policy_dir):
    config.serving.max_p99_latency_s = 0.0  # any request is too slow: the new version must go
    config.serving.probation_min_requests = 2
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        set_alias(config, names.ALIAS_CHAMPION, register_version(config, second_policy_dir))
        wait_for(lambda: server.server.router.champion.version == "2", what="the swap to version 2")
        served = [_generate(stub, "s-slow").policy_version for _ in range(2)]
        wait_for(lambda: server.server.router.champion.version == "1", what="the rollback to version 1")
        after = _generate(stub, "s-slow").policy_version
        server.call(server.server.rollout.check_once())
        assert server.server.router.champion.version == "1"  # the alias still names 2, which stays refused
    assert served == ["2", "2"] and after == "1"
    tag = version_tags(config, "2")[names.TAG_SERVING_ROLLBACK]
    assert "latency" in tag
    assert any(line.startswith("serving rollback version=1 from=2 reason=latency") for line in server.lines)


def test_canary_splits_traffic_with_per_version_metrics(config, tiny_policy_dir, second_policy_dir):
    config.serving.canary_alias = names.ALIAS_CANDIDATE
    config.serving.canary_fraction = 0.5
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    register_version(config, second_policy_dir, (names.ALIAS_CANDIDATE,))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        wait_for(lambda: server.server.router.canary is not None, what="the canary")
        versions = [_generate(stub, f"s-canary-{i}", seed=i + 1).policy_version for i in range(30)]  # 30 sessions
        info = stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=ADMIN, timeout=10)
        metrics = server.server.metrics
        canary_slot = server.server.router.canary
        set_alias(config, names.ALIAS_CHAMPION, "2")  # promotion: the canary becomes the champion
        wait_for(lambda: server.server.router.champion.version == "2", what="the promotion")
        promoted = server.server.router.champion
        info_after = stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=ADMIN, timeout=10)
    assert info.policy_version == "1" and info.canary_version == "2"
    assert promoted is canary_slot  # reused, not loaded twice
    assert info_after.policy_version == "2" and info_after.canary_version == ""
    assert set(versions) == {"1", "2"}  # P(one side empty) = 2 * 0.5^30
    assert versions == _canary_places(config, [f"s-canary-{i}" for i in range(30)], "2")  # the key store's places
    for version in ("1", "2"):
        counted = metrics.value("liverl_serving_requests_total", {"version": version, "api": "grpc", "outcome": "ok"})
        assert counted == versions.count(version)
