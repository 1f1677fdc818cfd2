"""Per-tenant champion adapters on the light engine and the real registry: each tenant's key runs on the adapter its
alias names, a tenant without one gets the shared policy, a tenant's new adapter is rolled (and rolled back, by
its probation or an admin) without touching another tenant's route, and an adapter that does not load never serves.

Every adapter changes the outputs, so a response's logprobs tell which adapter produced its tokens: they are
compared with peft's forward pass of base + the adapter the record names.
"""

import shutil
import time

import grpc
import httpx
import pytest
from mlflow import MlflowClient

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from serving.router import underlying
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    read_topic,
    register_version,
    serving_config,
    set_alias,
    version_tags,
    wait_for,
)
from tests.serving.lora_adapters import build_adapter, build_base, reference_logprobs

PROMPT = [2, 64, 65, 66]  # <bos> fix the file
KEYS = {"acme-key": {"tenant": "acme"}, "globex-key": {"tenant": "globex"}, "initech-key": {"tenant": "initech"}}


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    """A Llama base (registered first: version "1") and adapters of it."""
    tmp = tmp_path_factory.mktemp("tenant-lora")
    base = build_base(tmp / "base", seed=0)
    return {"base": base, **{name: build_adapter(base, tmp / name, base_version="1", seed=seed)
                             for name, seed in (("a1", 21), ("a2", 22), ("a3", 23))}}


@pytest.fixture
def config(stack, tmp_path, request):
    name = f"tenant-{request.node.name[:30]}-{tmp_path.name}"
    config = serving_config(module_topics(stack, name), tmp_path, name, api_keys=KEYS, admin_api_keys=["admin-key"],
                            rate_limit_per_s=1e6, rate_limit_burst=1_000_000)
    config.serving.tenants.watch = ["acme", "globex"]
    return config


def _register_adapter(config, folder, base_version: str, aliases=()) -> str:
    version = register_version(config, folder)
    uri = config.mlflow.tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = config.mlflow.registered_model
    client.set_model_version_tag(model, version, names.TAG_WEIGHTS_KIND, names.WEIGHTS_ADAPTER)
    client.set_model_version_tag(model, version, names.TAG_BASE_VERSION, base_version)
    for alias in aliases:
        client.set_registered_model_alias(model, alias, version)
    return version


def _generate(stub, key, seed=1, session=""):
    request = serving_pb2.GenerateRequest(prompt_token_ids=PROMPT, session_id=session or f"s-{key}",
                                          sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=4, seed=seed))
    return stub.Generate(request, metadata=(("authorization", f"Bearer {key}"),), timeout=60)


def _served(server, tenant: str) -> str:
    slot = server.server.router.tenants.get(tenant)
    return slot.version if slot is not None else ""


def _matches(policies, folder, response) -> bool:
    expected = reference_logprobs(policies["base"], folder, PROMPT, list(response.token_ids))
    return list(response.logprobs) == pytest.approx(expected, abs=1e-4)


def test_each_tenant_runs_on_its_own_adapter_and_a_roll_moves_only_its_own(config, policies):
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base, (names.tenant_champion_alias("acme"),))
    globex_1 = _register_adapter(config, policies["a2"], base, (names.tenant_champion_alias("globex"),))
    acme_2 = _register_adapter(config, policies["a3"], base)
    folders = {base: None, acme_1: policies["a1"], globex_1: policies["a2"], acme_2: policies["a3"]}
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        wait_for(lambda: (_served(server, "acme"), _served(server, "globex")) == (acme_1, globex_1),
                 what="both tenants' adapters")
        globex_slot = server.server.router.tenants["globex"]
        first = {key: _generate(stub, key, seed=i + 1) for i, key in enumerate(KEYS)}
        set_alias(config, names.tenant_champion_alias("acme"), acme_2)
        rolled = server.call(server.server.rollout.check_once())
        second = {key: _generate(stub, key, seed=i + 11) for i, key in enumerate(KEYS)}
        assert server.server.router.tenants["globex"] is globex_slot  # the other tenant's route untouched
    assert [r.ok for r in rolled] == [True] and rolled[0].tenant == "acme"
    assert {k: r.policy_version for k, r in first.items()} == {"acme-key": acme_1, "globex-key": globex_1,
                                                               "initech-key": base}
    assert {k: r.policy_version for k, r in second.items()} == {"acme-key": acme_2, "globex-key": globex_1,
                                                                "initech-key": base}
    responses = [*first.values(), *second.values()]
    for response in responses:
        assert _matches(policies, folders[response.policy_version], response)
    assert not _matches(policies, policies["a2"], first["acme-key"])  # not the other tenant's adapter

    calls = {c.request_id: c for c in (model_call_pb2.ModelCall.FromString(r.value) for r in
                                       read_topic(config, config.kafka.model_calls_topic, expect=len(responses)))}
    for response in responses:
        call = calls[response.request_id]
        assert call.policy_version == response.policy_version
        assert (call.base_version, bool(call.adapter_name)) == (("", False) if call.policy_version == base
                                                                else (base, True))
    assert calls[first["acme-key"].request_id].tenant_id == "acme"
    assert calls[first["acme-key"].request_id].adapter_name != calls[first["globex-key"].request_id].adapter_name
    assert any(line.startswith(f"serving tenant-swap tenant=acme version={acme_2} previous={acme_1}")
               for line in server.lines), server.lines


def test_probation_breach_rolls_that_tenant_back_alone(config, policies):
    config.serving.probation_min_requests = 1
    config.serving.max_p99_latency_s = 1e-6  # every request breaches it: the tenant's new adapter must go
    config.serving.probation_s = 60.0
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base)
    globex_1 = _register_adapter(config, policies["a2"], base, (names.tenant_champion_alias("globex"),))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        rollout = server.server.rollout
        wait_for(lambda: _served(server, "globex") == globex_1, what="globex's adapter")
        rollout.group("globex").probation.cancel()  # globex passed its probation; acme's is the one judged
        set_alias(config, names.tenant_champion_alias("acme"), acme_1)
        wait_for(lambda: _served(server, "acme") == acme_1, what="acme's adapter")
        on_new = _generate(stub, "acme-key")
        wait_for(lambda: "acme" not in server.server.router.tenants, what="acme's rollback to the shared policy")
        after = _generate(stub, "acme-key", seed=2)
        other = _generate(stub, "globex-key", seed=3)
        rolls = server.call(rollout.check_once())  # the alias still names the refused version
    assert on_new.policy_version == acme_1
    assert (after.policy_version, other.policy_version) == (base, globex_1)
    assert rolls == []
    assert any(line.startswith(f"serving tenant-rollback tenant=acme version=shared from={acme_1} reason=latency")
               for line in server.lines), server.lines
    tag = version_tags(config, acme_1)[names.TAG_SERVING_ROLLBACK]
    assert '"reason": "latency"' in tag and '"tenant": "acme"' in tag
    assert names.TAG_SERVING_ROLLBACK not in version_tags(config, globex_1)


def test_admin_rollback_returns_to_the_previous_adapter_and_a_broken_one_never_serves(config, policies, tmp_path):
    broken = tmp_path / "broken-adapter"
    shutil.copytree(policies["a3"], broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    config.serving.min_swap_interval_s = 3600.0  # the watcher must not undo the admin's choices
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base, (names.tenant_champion_alias("acme"),))
    acme_2 = _register_adapter(config, policies["a2"], base)
    bad = _register_adapter(config, broken, base)
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        rollout = server.server.rollout
        wait_for(lambda: _served(server, "acme") == acme_1, what="acme's first adapter")
        refused = server.call(rollout.swap_to(bad, "force", tenant="acme"))
        after_bad = _generate(stub, "acme-key")
        admin = (("authorization", "Bearer admin-key"),)  # the admin APIs name the tenant's group
        assert serving_pb2_grpc.PolicyAdminStub(channel).ForceSwap(
            serving_pb2.SwapRequest(version=acme_2, tenant="acme"), metadata=admin, timeout=120).ok
        on_second = _generate(stub, "acme-key", seed=2)
        rolled = httpx.post(server.http_base + "/admin/rollback", json={"reason": "bad answers", "tenant": "acme"},
                            headers=dict(admin), timeout=120).json()
        back = _generate(stub, "acme-key", seed=3)
        loaded = [a.version for a in rollout.tenant_slots.loaded()]
    assert not refused.ok and refused.version == acme_1 and "refused" in refused.message, refused.message
    assert "tenant-smoke-failed" in version_tags(config, bad)[names.TAG_SERVING_ROLLBACK]
    assert (after_bad.policy_version, on_second.policy_version, back.policy_version) == (acme_1, acme_2, acme_1)
    assert rolled["ok"] and rolled["policy_version"] == acme_1, rolled
    assert _matches(policies, policies["a1"], back) and _matches(policies, policies["a2"], on_second)
    assert bad not in loaded


def test_an_adapter_of_another_base_waits_and_the_tenant_keeps_the_shared_policy(config, policies):
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    other = _register_adapter(config, policies["a1"], "77", (names.tenant_champion_alias("acme"),))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        wait_for(lambda: any("tenant-swap-waiting tenant=acme" in line for line in server.lines),
                 what="the base mismatch said")
        response = _generate(stub, "acme-key")
        rolls = server.call(server.server.rollout.check_once())
    assert response.policy_version == base
    assert [r.ok for r in rolls] == [False] and "base '77'" in rolls[0].message
    assert sum("tenant-swap-waiting tenant=acme" in line for line in server.lines) == 1  # said once
    assert names.TAG_SERVING_ROLLBACK not in version_tags(config, other)  # not refused: its base may come


def test_a_new_base_on_a_second_engine_stops_the_old_one_only_after_tenants_requests_there_end(config, policies,
                                                                                              tmp_path):
    """A tenant's adapter lives on the engine of the base it applies to. When a new base comes in on an engine of
    its own, the tenant's new requests go to the shared champion, and the old engine is shut down only once the
    requests already running under the tenant's adapter are done, not when the old champion's own are."""
    config.serving.swap_mode = "two_engine"
    config.serving.probation_s = 0.5  # the old champion's engine is retired right after
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base, (names.tenant_champion_alias("acme"),))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        wait_for(lambda: _served(server, "acme") == acme_1, what="acme's adapter")
        acme_slot = server.server.router.tenants["acme"]
        old_engine = underlying(acme_slot.engine)

        async def lease(take: bool) -> None:  # a request of acme's running across the swap
            if take:
                acme_slot.acquire()
            else:
                acme_slot.release(True, 0.0)

        server.call(lease(True))
        new_base = register_version(config, build_base(tmp_path / "base-2", seed=1))
        set_alias(config, names.ALIAS_CHAMPION, new_base)
        wait_for(lambda: server.server.router.champion.version == new_base, what="the new base's engine")
        after = _generate(stub, "acme-key")
        wait_for(lambda: server.server.rollout.shared.previous is None, what="the old champion's probation to end")
        time.sleep(1.0)  # time enough for a retirement that ignored acme's request to shut the engine down
        still_up = old_engine._model is not None
        server.call(lease(False))
        wait_for(lambda: old_engine._model is None, what="the old engine's shutdown once acme's request ended")
    assert after.policy_version == new_base  # acme's adapter is of the old base: the shared champion serves it
    assert still_up


def test_a_tenant_group_rolls_out_through_the_fleet_canary_first_under_the_lease_and_rolls_back_fleet_wide(
        stack, tmp_path, policies):
    """Two replicas following acme's alias, r0 the fleet's canary: each adapter version is taken by r0 first, under
    the update lease of champion-acme on both; when r1's probation rolls the newest back, r0 follows it."""
    from serving.swap.fleet import TAG_CANARY_TOOK

    model = f"tenant-fleet-{tmp_path.name}"

    def replica(name, **serving):
        config = serving_config(stack, tmp_path / name, model, replica_id=name, record=False, watch_interval_s=0.3,
                                api_keys=KEYS, rate_limit_per_s=1e6, rate_limit_burst=1_000_000, max_unavailable=1,
                                probation_s=300.0, **serving)
        config.serving.tenants.watch = ["acme"]
        return config

    configs = [replica("r0", fleet_canary=True),
               replica("r1", probation_min_requests=1, max_p99_latency_s=1e-6)]  # r1 judges every version harshly
    base = register_version(configs[0], policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(configs[0], policies["a1"], base, (names.tenant_champion_alias("acme"),))
    acme_2 = _register_adapter(configs[0], policies["a2"], base)
    with ServerThread(configs[0]) as r0:
        wait_for(lambda: r0.server.rollout.fleet.canary_lease.holders() == ["r0"], 30, "the canary's lease")
        with ServerThread(configs[1]) as r1, grpc.insecure_channel(r1.grpc_target) as channel:
            replicas = [r0, r1]
            wait_for(lambda: all(_served(r, "acme") == acme_1 for r in replicas), what="acme_1 on both replicas")
            set_alias(configs[0], names.tenant_champion_alias("acme"), acme_2)
            wait_for(lambda: all(_served(r, "acme") == acme_2 for r in replicas), what="acme_2 on both replicas")
            judged = _generate(serving_pb2_grpc.PolicyServiceStub(channel), "acme-key")  # breaches r1's p99
            wait_for(lambda: all(_served(r, "acme") == acme_1 for r in replicas), what="the fleet-wide rollback")
            windows = [r.server.rollout.group("acme").update_windows for r in replicas]
            shared_windows = [r.server.rollout.shared.update_windows for r in replicas]
            lines = [list(r.lines) for r in replicas]

    assert judged.policy_version == acme_2
    assert any(line.startswith(f"serving tenant-rollback tenant=acme version={acme_1} from={acme_2} reason=latency")
               for line in lines[1]), lines[1]
    assert any(line.startswith(f"serving tenant-rollback tenant=acme version={acme_1} from={acme_2} reason=fleet")
               for line in lines[0]), lines[0]
    tag = version_tags(configs[0], acme_2)[names.TAG_SERVING_ROLLBACK]
    assert '"reason": "latency"' in tag and '"tenant": "acme"' in tag
    for version in (acme_1, acme_2):  # the canary replica took each version before the other one could
        assert '"replica": "r0"' in version_tags(configs[0], version)[TAG_CANARY_TOOK]
    # Every swap and rollback of the tenant's group held its lease: two swaps and a rollback on each replica,
    # the canary's first; the shared group, whose alias never moved, took none.
    assert [len(w) for w in windows] == [3, 3] and shared_windows == [[], []]
    assert windows[0][0][0] <= windows[1][0][0] and windows[0][1][0] <= windows[1][1][0]


def test_a_tenant_canary_takes_a_share_of_that_tenants_requests_and_is_promoted_as_it_is(config, policies):
    config.serving.canary_alias = names.ALIAS_CANDIDATE  # a tenant's canary alias: candidate-<tenant>
    config.serving.canary_fraction = 0.5
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base, (names.tenant_champion_alias("acme"),))
    acme_2 = _register_adapter(config, policies["a2"], base, (names.tenant_candidate_alias("acme"),))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        router = server.server.router
        wait_for(lambda: _served(server, "acme") == acme_1 and "acme" in router.tenant_canaries, what="acme's canary")
        canary_slot = router.tenant_canaries["acme"]
        acme = [_generate(stub, "acme-key", seed=i + 1, session=f"s-acme-{i}") for i in range(30)]  # 30 sessions
        others = {_generate(stub, "globex-key", seed=i + 1).policy_version for i in range(5)}
        set_alias(config, names.tenant_champion_alias("acme"), acme_2)  # promotion: the canary serves acme alone
        wait_for(lambda: _served(server, "acme") == acme_2, what="the promotion")
        promoted = router.tenants["acme"]
        canaries_after = dict(router.tenant_canaries)
    assert {r.policy_version for r in acme} == {acme_1, acme_2}  # P(one side empty) = 2 * 0.5^30
    assert others == {base} and router.canary is None  # no other tenant, nor the shared group, has a canary
    assert promoted is canary_slot and canaries_after == {}  # reused, not loaded twice
    folders = {acme_1: policies["a1"], acme_2: policies["a2"]}
    assert all(_matches(policies, folders[r.policy_version], r) for r in acme[:6])
    assert any(line.startswith(f"serving tenant-swap tenant=acme version={acme_2} previous={acme_1}") and
               "mode=canary" in line for line in server.lines), server.lines


def test_a_tenant_without_an_adapter_of_its_own_gets_its_canary_beside_the_shared_champion(config, policies):
    # The gate's live canary of a tenant's first adapter (trainer/gate/canary.py): only `canary-acme` is set.
    config.serving.canary_alias = "canary"
    config.serving.canary_fraction = 0.5
    base = register_version(config, policies["base"], (names.ALIAS_CHAMPION,))
    acme_1 = _register_adapter(config, policies["a1"], base, (names.canary_alias("canary", "acme"),))
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        router = server.server.router
        wait_for(lambda: "acme" in router.tenant_canaries, what="acme's canary")
        acme = [_generate(stub, "acme-key", seed=i + 1, session=f"s-acme-{i}") for i in range(30)]
        again = [_generate(stub, "acme-key", seed=i + 1, session=f"s-acme-{i}") for i in range(30)]
        others = {_generate(stub, "globex-key", seed=i + 1, session=f"s-globex-{i}").policy_version for i in range(10)}
        canary_slot = router.tenant_canaries["acme"]
        set_alias(config, names.tenant_champion_alias("acme"), acme_1)  # the canary passed: acme's first champion
        wait_for(lambda: _served(server, "acme") == acme_1, what="the promotion")
        promoted = router.tenants["acme"]
    assert {r.policy_version for r in acme} == {base, acme_1}  # P(one side empty) = 2 * 0.5^30
    assert [r.policy_version for r in again] == [r.policy_version for r in acme]  # each session whole
    assert others == {base} and router.canary is None  # another tenant, and the shared group, have no canary
    assert promoted is canary_slot
    assert all(_matches(policies, policies["a1"], r) for r in acme if r.policy_version == acme_1)  # its tokens
