"""LoRA adapter versions on the real vLLM engine, one engine start for the module (the tests run in order):
(a) an adapter's logprobs equal peft's forward pass of base + adapter, (b) a swap to another adapter under
concurrent streaming load fails nothing, labels every response with the adapter that produced it and holds no
request, (c) rollback goes back to the previous adapter, still loaded, (d) an adapter of another base loads that
base in place and then the adapter (a reload drops vLLM's adapters), and a rollback loads the first base again.
"""

import statistics
import threading
import time

import grpc
import pytest
from mlflow import MlflowClient

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2, serving_pb2, serving_pb2_grpc
from tests.conftest import stored_key
from tests.serving.conftest import ServerThread, module_topics, read_topic, register_version, serving_config
from tests.serving.lora_adapters import build_adapter, build_base, reference_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # test_b bounds the swap's stall against the steady one

ADMIN = (("authorization", "Bearer admin-key"),)
PROMPTS = [[2, 64, 65, 66], [2, 67, 68], [2, 69, 64, 70, 65]]  # <bos> and word ids
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def lora_server(stack, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm-lora")
    base_dir = build_base(tmp / "base")
    config = serving_config(module_topics(stack, f"vllm-lora-{tmp.name}"), tmp, f"vllm-lora-{tmp.name}",
                            engine="vllm", admin_api_keys=["admin-key"], probation_s=1.0, min_swap_interval_s=3600.0,
                            max_model_len=128, gpu_memory_utilization=0.08,  # ~1.9 GiB: a shared machine
                            rate_limit_per_s=1e6, rate_limit_burst=1_000_000)  # the load must never meet the limit
    config.serving.lora.enabled = True
    config.serving.lora.max_loras, config.serving.lora.max_lora_rank, config.serving.lora.max_cpu_loras = 2, 8, 4
    base = register_version(config, base_dir, (names.ALIAS_CHAMPION,))
    folders = {base: None}
    uri = config.mlflow.tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    for seed in (11, 12):
        folder = build_adapter(base_dir, tmp / f"adapter-{seed}", base_version=base, seed=seed)
        version = register_version(config, folder)
        client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_WEIGHTS_KIND,
                                     names.WEIGHTS_ADAPTER)
        client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_BASE_VERSION, base)
        folders[version] = folder
    versions = sorted(folders, key=int)
    other_dir = build_base(tmp / "other-base", seed=1)
    other = register_version(config, other_dir)
    on_other_dir = build_adapter(other_dir, tmp / "adapter-other", base_version=other, seed=13)
    on_other = register_version(config, on_other_dir)
    with ServerThread(config) as server:
        server.base_dir, server.folders, server.versions = base_dir, folders, versions
        server.other_dir, server.on_other, server.on_other_dir = other_dir, on_other, on_other_dir
        server.adapter_names = {}
        yield server


def _stream(stub, prompt, seed, session, max_tokens=8) -> dict:
    """One streamed completion: its version(s), tokens, logprobs and the time of each chunk."""
    started = time.monotonic()
    out = {"versions": set(), "tokens": [], "logprobs": [], "times": [], "started": started, "prompt": prompt}
    sampling = common_pb2.SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed)
    request = serving_pb2.GenerateRequest(prompt_token_ids=prompt, session_id=session, sampling=sampling)
    for chunk in stub.GenerateStream(request, metadata=ADMIN, timeout=300):
        out["times"].append(time.monotonic())
        out["versions"].add(chunk.policy_version)
        out["tokens"] += list(chunk.token_ids)
        out["logprobs"] += list(chunk.logprobs)
    return out


def _matches(server, version, prompt, tokens, logprobs) -> float:
    """max |logprob - peft's| under version's base + adapter."""
    expected = reference_logprobs(server.base_dir, server.folders[version], prompt, tokens)
    return max(abs(a - b) for a, b in zip(logprobs, expected))


def _swap(server, channel, version):
    admin = serving_pb2_grpc.PolicyAdminStub(channel)
    return admin.ForceSwap(serving_pb2.SwapRequest(version=version), metadata=ADMIN, timeout=300)


def _recorded(server, session, count):
    config = server.server.config
    assert server.server.recorder.flush(30)
    mine = lambda records: [r for r in records if _keyed_by(config, r, session)]  # noqa: E731
    records = read_topic(config, config.kafka.model_calls_topic, expect=10_000,
                         until=lambda got: len(mine(got)) >= count)
    return [model_call_pb2.ModelCall.FromString(r.value) for r in mine(records)]


def test_a_vllm_adapter_gives_the_logprobs_of_base_plus_adapter(lora_server):
    base, first, _ = lora_server.versions
    with grpc.insecure_channel(lora_server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        on_base = [_stream(stub, p, 5 + i, "s-a") for i, p in enumerate(PROMPTS)]
        swapped = _swap(lora_server, channel, first)
        on_adapter = [_stream(stub, p, 5 + i, "s-a") for i, p in enumerate(PROMPTS)]
    assert swapped.ok, swapped.message
    assert any(f"serving swap version={first}" in line and "mode=adapter" in line for line in lora_server.lines)
    lora_server.adapter_names[first] = lora_server.server.router.champion.adapter
    differences = []
    for response in on_adapter:
        assert response["versions"] == {first}
        differences.append(_matches(lora_server, first, response["prompt"], response["tokens"], response["logprobs"]))
        base_only = _matches(lora_server, base, response["prompt"], response["tokens"], response["logprobs"])
        assert base_only > TOLERANCE, "the adapter left the base's logprobs as they were"
    for response in on_base:
        assert _matches(lora_server, base, response["prompt"], response["tokens"], response["logprobs"]) <= TOLERANCE
    print(f"vLLM adapter vs peft: max |logprob diff| {max(differences):.2e}")
    assert max(differences) <= TOLERANCE
    calls = _recorded(lora_server, "s-a", 6)
    assert {(c.policy_version, c.adapter_name, c.base_version) for c in calls} == {
        (base, "", ""), (first, lora_server.adapter_names[first].name, base)}


def test_b_adapter_swap_under_streaming_load_fails_and_holds_nothing(lora_server):
    _, first, second = lora_server.versions
    responses, failures, stop = [], [], threading.Event()
    with grpc.insecure_channel(lora_server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)

        def load(worker):
            i = 0
            while not stop.is_set():
                try:
                    responses.append(_stream(stub, PROMPTS[i % len(PROMPTS)], 100 * worker + i + 1, f"s-b-{worker}"))
                except grpc.RpcError as error:
                    failures.append(error)
                i += 1

        workers = [threading.Thread(target=load, args=(w,)) for w in range(4)]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 600  # a ceiling only: the loops below stop on counts
        while len(responses) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        promoted = time.monotonic()
        swapped = _swap(lora_server, channel, second)
        switched = time.monotonic()
        while sum(second in r["versions"] for r in responses) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for worker in workers:
            worker.join()
    assert swapped.ok, swapped.message
    lora_server.adapter_names[second] = lora_server.server.router.champion.adapter
    assert failures == []
    assert all(len(r["versions"]) == 1 for r in responses)
    assert {v for r in responses for v in r["versions"]} == {first, second}
    for version in (first, second):
        served = [r for r in responses if version in r["versions"]]
        for response in served[:2] + served[-2:]:
            assert _matches(lora_server, version, response["prompt"], response["tokens"],
                            response["logprobs"]) <= TOLERANCE

    def stall(r):  # the longest a streaming request waited for its next token (or its first)
        return max(b - a for a, b in zip([r["started"], *r["times"]], r["times"]))

    steady = [stall(r) for r in responses if r["times"][-1] < promoted]
    across = [stall(r) for r in responses if r["started"] < switched and r["times"][-1] > promoted]
    held = [max(0.0, s - statistics.median(steady)) for s in across]
    first_new = min((r for r in responses if second in r["versions"]), key=lambda r: r["started"])
    p99 = sorted(held)[min(len(held) - 1, int(0.99 * len(held)))]
    print(f"adapter swap under load: promotion -> switched {switched - promoted:.3f}s, {len(responses)} requests, "
          f"0 failed, {len(across)} across the swap; held beyond the steady median stall: p99 {p99 * 1000:.1f} ms "
          f"(steady stall median {statistics.median(steady) * 1000:.1f} ms, p99 "
          f"{sorted(steady)[int(0.99 * (len(steady) - 1))] * 1000:.1f} ms); first request on the new adapter: first "
          f"token after {(first_new['times'][0] - first_new['started']) * 1000:.1f} ms")
    assert any(f"serving swap version={second}" in line and "mode=adapter pause_s=0.000" in line
               for line in lora_server.lines)
    assert p99 <= max(0.5, 2 * max(steady))  # a ceiling against a stall of the adapter's load (6.9 s unloaded)


def test_c_rollback_returns_to_the_previous_adapter(lora_server):
    _, first, second = lora_server.versions
    with grpc.insecure_channel(lora_server.grpc_target) as channel:
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="check"), metadata=ADMIN, timeout=120)
        after = [_stream(stub, p, 50 + i, "s-c") for i, p in enumerate(PROMPTS)]
    assert rolled.ok and rolled.policy_version == first and rolled.previous_version == second, rolled.message
    assert lora_server.server.router.champion.adapter == lora_server.adapter_names[first]
    assert any(line.startswith(f"serving rollback version={first} from={second}") and "pause_s=0.000" in line
               for line in lora_server.lines)
    for response in after:
        assert response["versions"] == {first}
        assert _matches(lora_server, first, response["prompt"], response["tokens"], response["logprobs"]) <= TOLERANCE
    calls = _recorded(lora_server, "s-c", 3)
    assert {c.adapter_name for c in calls} == {lora_server.adapter_names[first].name}


def test_d_an_adapter_of_another_base_loads_that_base_then_rollback_loads_the_first(lora_server):
    _, first, _ = lora_server.versions
    on_other = lora_server.on_other
    with grpc.insecure_channel(lora_server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        swapped = _swap(lora_server, channel, on_other)
        served = [_stream(stub, p, 70 + i, "s-d") for i, p in enumerate(PROMPTS)]
        rolled = admin.Rollback(serving_pb2.RollbackRequest(reason="check"), metadata=ADMIN, timeout=300)
        back = [_stream(stub, p, 80 + i, "s-d") for i, p in enumerate(PROMPTS)]
    assert swapped.ok, swapped.message
    assert any(f"serving swap version={on_other}" in line and "mode=in_place" in line for line in lora_server.lines)
    for response in served:
        assert response["versions"] == {on_other}
        expected = reference_logprobs(lora_server.other_dir, lora_server.on_other_dir, response["prompt"],
                                      response["tokens"])
        assert max(abs(a - b) for a, b in zip(response["logprobs"], expected)) <= TOLERANCE
    assert rolled.ok and rolled.policy_version == first, rolled.message
    for response in back:
        assert response["versions"] == {first}
        assert _matches(lora_server, first, response["prompt"], response["tokens"], response["logprobs"]) <= TOLERANCE


def _keyed_by(config, record, session: str) -> bool:
    """Whether the record is a call of the session, keyed as sealed records are (the session's pseudonym)."""
    call = model_call_pb2.ModelCall.FromString(record.value)
    return call.session_id == session and record.key == stored_key(config, call.tenant_id, session)
