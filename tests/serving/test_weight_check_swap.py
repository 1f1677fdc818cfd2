"""Swaps broken on purpose are refused by the weight probe before any traffic (light engine, real registry):
a wrong weights file and a truncated one never serve, the replica keeps serving the previous weights exactly,
and each refusal is counted, logged with its reason and tagged on the registry version. A version exported
before probes existed is served with a warning and a count."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from liverl.contracts import names
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import WORDS, ServerThread, module_topics, register_version, serving_config, version_tags
from tests.serving.probe_versions import generate, probe_count, reference, with_probe


@pytest.fixture(scope="module")
def third_policy_dir(tmp_path_factory) -> Path:
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("policy") / "third", WORDS, seed=2)


def test_broken_swaps_are_refused_and_the_replica_keeps_its_weights(stack, tiny_policy_dir, second_policy_dir,
                                                                    third_policy_dir, tmp_path):
    config = serving_config(module_topics(stack, f"probe-swap-{tmp_path.name}"), tmp_path,
                            f"probe-swap-{tmp_path.name}", min_swap_interval_s=3600.0)
    first = with_probe(tiny_policy_dir, tmp_path / "first")
    register_version(config, first, (names.ALIAS_CHAMPION,))
    wrong = with_probe(second_policy_dir, tmp_path / "wrong", probe_of=third_policy_dir)  # another version's file
    truncated = with_probe(third_policy_dir, tmp_path / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a half-written copy
    versions = {name: register_version(config, folder) for name, folder in
                [("wrong", wrong), ("truncated", truncated), ("good", with_probe(third_policy_dir, tmp_path / "good")),
                 ("unprobed", second_policy_dir)]}

    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)

        def force(name: str) -> serving_pb2.SwapResponse:
            return admin.ForceSwap(serving_pb2.SwapRequest(version=versions[name]), timeout=300)

        refused = force("wrong")
        assert not refused.ok and "does not reproduce its weight probe" in refused.message, refused.message
        assert probe_count(server, "match") == 1  # the first version was checked before it took traffic
        assert server.server.router.champion.version == "1" and probe_count(server, "mismatch") == 1
        assert any(line.startswith(f"serving swap-refused version={versions['wrong']}") and "weight probe" in line
                   for line in server.lines)
        assert "weight probe" in version_tags(config, versions["wrong"])[names.TAG_SERVING_ROLLBACK]
        after_wrong = generate(channel)

        assert not force("truncated").ok  # the load itself fails: never served either
        assert server.server.router.champion.version == "1"
        after_truncated = generate(channel)

        assert force("good").ok and probe_count(server, "match") == 2
        assert force("unprobed").ok and probe_count(server, "missing") == 1
        assert f"serving weight-probe-missing version={versions['unprobed']}" in server.lines

    for response in (after_wrong, after_truncated):  # the previous weights, exactly, after each refusal
        assert response.policy_version == "1"
        assert list(response.logprobs) == pytest.approx(reference(tiny_policy_dir, list(response.token_ids)), abs=1e-5)


def test_a_rollback_in_place_is_checked_like_a_swap(stack, tiny_policy_dir, second_policy_dir, third_policy_dir,
                                                    tmp_path):
    """A rollback loads the previous version's kept folder: when that folder no longer holds the weights its probe
    was measured on, the rollback is refused before any traffic and the current version serves on, exactly."""
    config = serving_config(module_topics(stack, f"probe-back-{tmp_path.name}"), tmp_path,
                            f"probe-back-{tmp_path.name}", min_swap_interval_s=3600.0)
    register_version(config, with_probe(tiny_policy_dir, tmp_path / "first"), (names.ALIAS_CHAMPION,))
    second = register_version(config, with_probe(second_policy_dir, tmp_path / "second"))

    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        assert admin.ForceSwap(serving_pb2.SwapRequest(version=second), timeout=300).ok
        kept = server.server.rollout.shared.previous.policy_dir  # version 1's folder, kept on disk for a rollback
        shutil.copyfile(third_policy_dir / "model.safetensors", kept / "model.safetensors")  # replaced under it
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="bad answers"), timeout=300)
        after = generate(channel)
        champion = server.server.router.champion.version

    assert not rolled.ok and "does not reproduce its weight probe" in rolled.message, rolled.message
    assert rolled.policy_version == second and champion == second
    assert after.policy_version == second
    assert list(after.logprobs) == pytest.approx(reference(second_policy_dir, list(after.token_ids)), abs=1e-5)
