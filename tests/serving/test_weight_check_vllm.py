"""The weight probe on the real vLLM engine, in-place swaps broken on purpose: a wrong weights file, a half-written
one (its second half never written: it still parses), and a tied head vLLM's plain reload leaves packed from the old
weights (serving/engines/vllm_worker_extension.py). Each is refused before traffic, rolled back to the previous weights
exactly, counted and logged with its reason; a good swap passes. One engine start for the module."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from liverl.contracts import names
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import WORDS, ServerThread, module_topics, register_version, serving_config
from tests.serving.probe_versions import generate, probe_count, reference, with_probe

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]


@pytest.fixture(scope="module")
def server(stack, tiny_policy_dir, second_policy_dir, tmp_path_factory):
    from demo.policy.tiny_policy import build_policy

    tmp = tmp_path_factory.mktemp("probe-vllm")
    third = build_policy(tmp / "third", WORDS, seed=2)
    config = serving_config(module_topics(stack, f"probe-vllm-{tmp.name}"), tmp, f"probe-vllm-{tmp.name}",
                            engine="vllm", dtype="float32", gpu_memory_utilization=0.05, probation_s=1.0,
                            min_swap_interval_s=3600.0)  # 1.2 GiB: plenty for the tiny policy on a shared host
    register_version(config, with_probe(tiny_policy_dir, tmp / "first"), (names.ALIAS_CHAMPION,))
    half = with_probe(third, tmp / "half")
    weights = half / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes(raw[: len(raw) // 2] + bytes(len(raw) - len(raw) // 2))  # preallocated, half copied
    folders = {"second": with_probe(second_policy_dir, tmp / "second"),
               "wrong": with_probe(second_policy_dir, tmp / "wrong", probe_of=third),  # another version's file
               "half": half, "stale": with_probe(third, tmp / "stale")}
    with ServerThread(config) as running:
        running.versions = {name: register_version(config, folder) for name, folder in folders.items()}
        yield running


def _force(server, name: str) -> serving_pb2.SwapResponse:
    with grpc.insecure_channel(server.grpc_target) as channel:
        return serving_pb2_grpc.PolicyAdminStub(channel).ForceSwap(
            serving_pb2.SwapRequest(version=server.versions[name]), timeout=600)


def _serves_second_exactly(server, second_policy_dir: Path) -> None:
    champion = server.server.router.champion
    assert champion.version == server.versions["second"]
    assert server.call(champion.engine.weight_version()) == server.versions["second"]
    with grpc.insecure_channel(server.grpc_target) as channel:
        response = generate(channel)
    assert response.policy_version == server.versions["second"]
    assert list(response.logprobs) == pytest.approx(reference(second_policy_dir, list(response.token_ids)), abs=1e-4)


def _refused_with_reason(server, name: str) -> None:
    mismatches = probe_count(server, "mismatch")
    refused = _force(server, name)
    assert not refused.ok and "does not reproduce its weight probe" in refused.message, refused.message
    assert probe_count(server, "mismatch") == mismatches + 1
    assert any(line.startswith(f"serving swap-refused version={server.versions[name]}") and "weight probe" in line
               for line in server.lines)


def test_a_good_in_place_swap_reproduces_its_probe(server, second_policy_dir):
    assert probe_count(server, "match") == 1  # the first version, at start
    swapped = _force(server, "second")
    assert swapped.ok and "(in_place)" in swapped.message, swapped.message
    assert probe_count(server, "match") == 2
    _serves_second_exactly(server, second_policy_dir)


def test_a_wrong_weights_file_is_refused_and_rolled_back(server, second_policy_dir):
    _refused_with_reason(server, "wrong")
    _serves_second_exactly(server, second_policy_dir)


def test_a_half_written_weights_file_is_refused_and_rolled_back(server, second_policy_dir):
    _refused_with_reason(server, "half")
    _serves_second_exactly(server, second_policy_dir)


def test_a_head_left_packed_from_the_old_weights_is_refused(server, second_policy_dir):
    engine = server.server.router.champion.engine
    repacking = engine.update_weights

    async def without_repack(policy_dir, version):  # vLLM's own reload: the tied head keeps the old packed weight
        engine.update_weights = repacking  # once: the rollback that follows re-packs
        llm = engine._llm
        await llm.pause_generation(mode="wait", clear_cache=True)
        try:
            await llm.collective_rpc("reload_weights", kwargs={"weights_path": str(policy_dir)})
            await llm.update_weight_version(version)
        finally:
            await llm.resume_generation()
        return {"seconds": 0.0, "repacked_heads": 0}

    engine.update_weights = without_repack
    try:
        _refused_with_reason(server, "stale")
    finally:
        engine.update_weights = repacking
    _serves_second_exactly(server, second_policy_dir)
