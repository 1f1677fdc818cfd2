"""LoRA adapter versions on the light engine and the real registry: a champion that is an adapter of the served
base is switched to with no pause and no failed request, rollback goes back to the previous adapter, an adapter
of another base takes the full swap path, and an adapter that does not load never takes traffic.

Every version changes the outputs, so a record's logprobs tell which weights and adapter produced its tokens:
they are compared with peft's forward pass of the version the record names (and of another one).
"""

import grpc
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
from tests.serving.generate_load import GenerateLoad
from tests.serving.lora_adapters import build_adapter, build_base, reference_logprobs

ADMIN = (("authorization", "Bearer admin-key"),)
PROMPT = [2, 64, 65, 66]  # <bos> fix the file


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    """Two Llama bases (A, B) and adapters: two of A (registered after A as version "1"), one of B ("2")."""
    tmp = tmp_path_factory.mktemp("lora")
    base_a, base_b = build_base(tmp / "base-a", seed=0), build_base(tmp / "base-b", seed=1)
    return {"base_a": base_a, "base_b": base_b,
            "a1": build_adapter(base_a, tmp / "a1", base_version="1", seed=11),
            "a2": build_adapter(base_a, tmp / "a2", base_version="1", seed=12),
            "b1": build_adapter(base_b, tmp / "b1", base_version="2", seed=13)}


@pytest.fixture
def config(stack, tmp_path, request):
    name = f"lora-{request.node.name[:30]}-{tmp_path.name}"
    # load workers must never meet the key's rate limit: a refusal is instant, so one turns into hundreds
    return serving_config(module_topics(stack, name), tmp_path, name, admin_api_keys=["admin-key"],
                          rate_limit_per_s=1e6, rate_limit_burst=1_000_000)


def _register_adapter(config, folder, base_version: str) -> str:
    version = register_version(config, folder)
    uri = config.mlflow.tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_WEIGHTS_KIND,
                                 names.WEIGHTS_ADAPTER)
    client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_BASE_VERSION, base_version)
    return version


def _generate(stub, session, seed=1, max_tokens=4):
    request = serving_pb2.GenerateRequest(prompt_token_ids=PROMPT, session_id=session,
                                          sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=max_tokens,
                                                                             seed=seed))
    return stub.Generate(request, metadata=ADMIN, timeout=60)



def _records(config, count):
    calls = [model_call_pb2.ModelCall.FromString(r.value)
             for r in read_topic(config, config.kafka.model_calls_topic, expect=count)]
    return {c.request_id: c for c in calls}


def test_adapter_champions_swap_under_load_with_no_pause_and_exact_records(config, policies):
    base = register_version(config, policies["base_a"], (names.ALIAS_CHAMPION,))
    first = _register_adapter(config, policies["a1"], base)
    second = _register_adapter(config, policies["a2"], base)
    folders = {base: None, first: policies["a1"], second: policies["a2"]}
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        engine = underlying(server.server.router.champion.engine)
        in_flight = stub.GenerateStream(serving_pb2.GenerateRequest(
            prompt_token_ids=PROMPT, session_id="s-long",
            sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=100, seed=9)), metadata=ADMIN, timeout=120)
        assert next(in_flight).policy_version == base

        with GenerateLoad(lambda worker, i: _generate(stub, f"s-load-{worker}", seed=i + 1)) as load:
            for version in (first, second):
                set_alias(config, names.ALIAS_CHAMPION, version)
                wait_for(lambda: server.server.router.champion.version == version, what=f"the swap to {version}")
                wait_for(lambda: sum(r.policy_version == version for r in load.responses) >= 4,
                         what=f"requests served by {version}")
        responses, failures = load.responses, load.failures
        rest = list(in_flight)
        champion = server.server.router.champion
        assert underlying(champion.engine) is engine  # no second engine, no weight reload
        assert engine.has_adapter(champion.adapter)

    assert failures == []
    assert {r.policy_version for r in responses} == {base, first, second}
    assert {c.policy_version for c in rest} == {base}  # the long request finished on the base
    swaps = [line for line in server.lines if line.startswith("serving swap version=")]
    assert [line.split()[2] for line in swaps] == [f"version={first}", f"version={second}"]
    assert all("mode=adapter" in line and "pause_s=0.000" in line for line in swaps), swaps

    by_request = _records(config, len(responses) + 1)
    assert len(by_request) == len(responses) + 1
    names_of = {c.policy_version: c.adapter_name for c in by_request.values()}
    assert names_of[base] == "" and names_of[first] and names_of[second] and names_of[first] != names_of[second]
    for call in by_request.values():
        assert call.base_version == ("" if call.policy_version == base else base)
    long_call = next(c for c in by_request.values() if c.session_id == "s-long")
    checked = [long_call] + [by_request[r.request_id] for v in (first, second)
                             for r in [x for x in responses if x.policy_version == v][-2:]]
    for call in checked:
        tokens, prompt = list(call.completion_token_ids), list(call.prompt_token_ids)
        expected = reference_logprobs(policies["base_a"], folders[call.policy_version], prompt, tokens)
        assert list(call.completion_logprobs) == pytest.approx(expected, abs=1e-4)
        other = folders[second] if call.policy_version != second else folders[first]
        assert list(call.completion_logprobs) != pytest.approx(
            reference_logprobs(policies["base_a"], other, prompt, tokens), abs=1e-4)


def test_rollback_returns_to_the_previous_adapter_still_loaded(config, policies):
    base = register_version(config, policies["base_a"], (names.ALIAS_CHAMPION,))
    first = _register_adapter(config, policies["a1"], base)
    second = _register_adapter(config, policies["a2"], base)
    config.serving.min_swap_interval_s = 3600.0  # the watcher must not undo the admin's choices
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        assert admin.ForceSwap(serving_pb2.SwapRequest(version=first), metadata=ADMIN, timeout=120).ok
        on_first = _generate(stub, "s-rb", seed=3)
        first_adapter = server.server.router.champion.adapter
        assert admin.ForceSwap(serving_pb2.SwapRequest(version=second), metadata=ADMIN, timeout=120).ok
        second_adapter = server.server.router.champion.adapter
        on_second = _generate(stub, "s-rb", seed=4)
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="bad answers"), metadata=ADMIN, timeout=60)
        after = _generate(stub, "s-rb", seed=5)
        engine = underlying(server.server.router.champion.engine)
        assert server.server.router.champion.adapter == first_adapter  # the same name and id: still loaded
        wait_for(lambda: not engine.has_adapter(second_adapter), what="the rolled-back adapter unloaded")
        assert engine.has_adapter(first_adapter)
    assert (on_first.policy_version, on_second.policy_version, after.policy_version) == (first, second, first)
    assert rolled.ok and rolled.policy_version == first and rolled.previous_version == second
    assert any(line.startswith(f"serving rollback version={first} from={second}") and "pause_s=0.000" in line
               for line in server.lines), server.lines
    assert "bad answers" in version_tags(config, second)[names.TAG_SERVING_ROLLBACK]
    by_request = _records(config, 3)
    assert by_request[after.request_id].adapter_name == first_adapter.name
    assert by_request[on_second.request_id].adapter_name == second_adapter.name
    expected = reference_logprobs(policies["base_a"], policies["a1"], PROMPT, list(after.token_ids))
    assert list(after.logprobs) == pytest.approx(expected, abs=1e-4)


def test_adapter_of_another_base_loads_that_base_in_place_then_the_adapter(config, policies):
    base_a = register_version(config, policies["base_a"], (names.ALIAS_CHAMPION,))
    base_b = register_version(config, policies["base_b"])
    assert base_b == "2"  # the adapter's manifest names it
    on_b = _register_adapter(config, policies["b1"], base_b)
    config.serving.min_swap_interval_s = 3600.0
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        swapped = admin.ForceSwap(serving_pb2.SwapRequest(version=on_b), metadata=ADMIN, timeout=120)
        served = _generate(stub, "s-other", seed=6, max_tokens=6)
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="check"), metadata=ADMIN, timeout=60)
        back = _generate(stub, "s-other", seed=7, max_tokens=6)
    assert swapped.ok and served.policy_version == on_b, swapped.message
    assert any(f"serving swap version={on_b}" in line and "mode=in_place" in line for line in server.lines)
    expected = reference_logprobs(policies["base_b"], policies["b1"], PROMPT, list(served.token_ids))
    assert list(served.logprobs) == pytest.approx(expected, abs=1e-4)
    assert rolled.ok and back.policy_version == base_a
    assert list(back.logprobs) == pytest.approx(
        reference_logprobs(policies["base_a"], None, PROMPT, list(back.token_ids)), abs=1e-4)
    call = _records(config, 2)[served.request_id]
    assert call.base_version == base_b and call.adapter_name


def test_adapter_that_does_not_load_never_takes_traffic(config, policies, tmp_path):
    import shutil

    broken = tmp_path / "broken-adapter"
    shutil.copytree(policies["a1"], broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    base = register_version(config, policies["base_a"], (names.ALIAS_CHAMPION,))
    bad = _register_adapter(config, broken, base)
    orphan_dir = build_adapter(policies["base_a"], tmp_path / "orphan", base_version="99", seed=14)
    orphan = _register_adapter(config, orphan_dir, "99")  # no version 99 in the registry
    config.serving.min_swap_interval_s = 3600.0
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        refused = admin.ForceSwap(serving_pb2.SwapRequest(version=bad), metadata=ADMIN, timeout=120)
        after_bad = _generate(stub, "s-bad")
        orphaned = admin.ForceSwap(serving_pb2.SwapRequest(version=orphan), metadata=ADMIN, timeout=120)
        after_orphan = _generate(stub, "s-bad")
    assert not refused.ok and "adapter" in refused.message, refused.message
    assert not orphaned.ok and "failed to load" in orphaned.message, orphaned.message
    assert (after_bad.policy_version, after_orphan.policy_version) == (base, base)
    # the refused adapter left the base's outputs as they were
    assert list(after_bad.logprobs) == pytest.approx(
        reference_logprobs(policies["base_a"], None, PROMPT, list(after_bad.token_ids)), abs=1e-4)
    assert "smoke-failed" in version_tags(config, bad)[names.TAG_SERVING_ROLLBACK]


def test_an_adapter_version_is_checked_against_its_own_weight_probe(config, policies, tmp_path):
    """The trainer measures an adapter version's probe on base + adapter and writes it into the adapter folder:
    serving checks that one (not its base's) under the adapter, and refuses an adapter whose probe it cannot
    reproduce."""
    import shutil

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.io.weight_probe import measure_weight_probe

    def probed(adapter_dir, out, with_adapter: bool):
        shutil.copytree(adapter_dir, out)
        model = AutoModelForCausalLM.from_pretrained(policies["base_a"], dtype=torch.float32).eval()
        if with_adapter:
            model = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
        measure_weight_probe(model).write(out)
        return out

    base = register_version(config, policies["base_a"], (names.ALIAS_CHAMPION,))
    good = _register_adapter(config, probed(policies["a1"], tmp_path / "good", with_adapter=True), base)
    wrong = _register_adapter(config, probed(policies["a2"], tmp_path / "wrong", with_adapter=False), base)
    config.serving.min_swap_interval_s = 3600.0
    with ServerThread(config) as server, grpc.insecure_channel(server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        swapped = admin.ForceSwap(serving_pb2.SwapRequest(version=good), metadata=ADMIN, timeout=120)
        matched = server.server.metrics.value("liverl_serving_weight_probes_total", {"outcome": "match"})
        refused = admin.ForceSwap(serving_pb2.SwapRequest(version=wrong), metadata=ADMIN, timeout=120)
        mismatched = server.server.metrics.value("liverl_serving_weight_probes_total", {"outcome": "mismatch"})
    assert swapped.ok, swapped.message
    assert matched >= 1
    assert not refused.ok and "weight probe" in refused.message, refused.message
    assert mismatched == 1
