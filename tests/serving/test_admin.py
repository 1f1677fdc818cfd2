"""The admin force-swap and rollback are one operation (serving/swap/rollout.py, Rollout.force_swap and admin_rollback):
gRPC PolicyAdmin and HTTP /admin/* answer the same, refuse the same, and tag the same reason."""

import json

import grpc
import httpx
import pytest

from liverl.contracts import names
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    register_version,
    serving_config,
    set_alias,
    version_tags,
)

ADMIN = (("authorization", "Bearer admin-key"),)
LONG_REASON = "bad answers " * 60  # 720 characters: more than a tag keeps


def _fields(response: serving_pb2.SwapResponse) -> dict:
    return {"ok": response.ok, "policy_version": response.policy_version,
            "previous_version": response.previous_version, "message": response.message}


def test_grpc_and_http_admin_answer_the_same(stack, tmp_path, tiny_policy_dir, second_policy_dir):
    config = serving_config(module_topics(stack, f"admin-{tmp_path.name}"), tmp_path, f"admin-{tmp_path.name}",
                            admin_api_keys=["admin-key"], min_swap_interval_s=3600.0, record=False)
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    second = register_version(config, second_policy_dir)
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)

        def http(path: str, body: dict) -> dict:
            reply = httpx.post(server.http_base + path, json=body, headers=dict(ADMIN), timeout=120)
            assert reply.status_code == 200, reply.text
            return reply.json()

        nothing = [_fields(admin.Rollback(serving_pb2.RollbackRequest(reason=LONG_REASON), metadata=ADMIN,
                                          timeout=60)), http("/admin/rollback", {"reason": LONG_REASON})]
        swaps = [_fields(admin.ForceSwap(serving_pb2.SwapRequest(version=second), metadata=ADMIN, timeout=120))]
        rollbacks = [http("/admin/rollback", {"reason": LONG_REASON})]
        http_tag = version_tags(config, second)[names.TAG_SERVING_ROLLBACK]
        swaps.append(http("/admin/swap", {"version": second}))  # a forced swap takes a rolled-back version again
        rollbacks.append(_fields(admin.Rollback(serving_pb2.RollbackRequest(reason=LONG_REASON), metadata=ADMIN,
                                                timeout=60)))
        grpc_tag = version_tags(config, second)[names.TAG_SERVING_ROLLBACK]
        set_alias(config, names.ALIAS_CHAMPION, second)  # an empty version: the alias's
        to_alias = [_fields(admin.ForceSwap(serving_pb2.SwapRequest(), metadata=ADMIN, timeout=120))]
        http("/admin/rollback", {})
        to_alias.append(http("/admin/swap", {}))
        # A tenant group this server does not follow is refused alike, and naming it makes none
        unknown = []
        for call in (lambda: admin.ForceSwap(serving_pb2.SwapRequest(tenant="acme"), metadata=ADMIN, timeout=30),
                     lambda: admin.Rollback(serving_pb2.RollbackRequest(tenant="acme"), metadata=ADMIN, timeout=30)):
            with pytest.raises(grpc.RpcError) as refused:
                call()
            unknown.append((refused.value.code(), refused.value.details()))
        for path in ("/admin/swap", "/admin/rollback"):
            reply = httpx.post(server.http_base + path, json={"tenant": "acme"}, headers=dict(ADMIN), timeout=30)
            unknown.append((reply.status_code, reply.json()["error"]["message"]))
        groups = set(server.server.rollout.groups)

    assert groups == {""}, groups
    assert [code for code, _ in unknown] == [grpc.StatusCode.NOT_FOUND] * 2 + [404] * 2
    assert len({message for _, message in unknown}) == 1 and "'acme' has no group" in unknown[0][1]

    assert nothing[0] == nothing[1] and not nothing[0]["ok"] and "previous" in nothing[0]["message"]
    assert swaps[0] == swaps[1] and swaps[0]["ok"] and swaps[0]["policy_version"] == second
    assert rollbacks[0] == rollbacks[1] and rollbacks[0]["ok"] and rollbacks[0]["policy_version"] == "1"
    assert to_alias[0] == to_alias[1] and to_alias[0]["policy_version"] == second
    tagged = [json.loads(tag) for tag in (http_tag, grpc_tag)]
    assert [(t["reason"], t["message"]) for t in tagged] == [("admin", LONG_REASON[:500])] * 2  # cut the same way


def test_grpc_and_http_refuse_a_swap_on_a_fixed_folder_alike(hostile_server):
    with grpc.insecure_channel(hostile_server.grpc_target) as channel, pytest.raises(grpc.RpcError) as refused:
        serving_pb2_grpc.PolicyAdminStub(channel).ForceSwap(serving_pb2.SwapRequest(version="2"), metadata=ADMIN,
                                                            timeout=30)
    reply = httpx.post(hostile_server.http_base + "/admin/swap", json={"version": "2"}, headers=dict(ADMIN),
                       timeout=30)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reply.status_code == 409
    assert reply.json()["error"]["message"] == refused.value.details()
    assert "policy_dir" in refused.value.details()
