"""serving.engine = "upstream" against real `vllm serve` processes: liverl answers, the team's servers generate.

Two servers of one tiny Llama, started once for the module (tests/serving/vllm_serve.py): one with the flags
docs/upstream.md asks for, one without --logprobs-mode processed_logprobs (raw). A liverl server fronts each. The
recorded logprobs are compared with a plain fp32 forward pass of the same weights, as the trainer computes them.
"""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
import torch

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from serving.engines.engine import Sampling
from serving.engines.upstream.engine import UpstreamEngine
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    recorded_calls,
    reference_logprobs,
    register_version,
    serving_config,
)
from tests.serving.round_robin import RoundRobinUrls
from tests.serving.vllm_serve import API_KEY, VllmServe, start_all, stop_all

slow = pytest.mark.slow
pytestmark = pytest.mark.big_memory  # two vllm serve processes



@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """The fleet's base with the trainer's weight probe, and another base (other weights, its own probe)."""
    from tests.serving.lora_adapters import build_base
    from tests.serving.probe_versions import with_probe

    tmp = tmp_path_factory.mktemp("upstream-bases")
    served = with_probe(build_base(tmp / "base"), tmp / "served")
    other = with_probe(build_base(tmp / "other", seed=1), tmp / "other-probed")
    return served, other


@pytest.fixture(scope="module")
def vllm_servers(bases, tmp_path_factory):
    """(processed, raw): two real vLLM servers of the served base, started together."""
    logs = tmp_path_factory.mktemp("upstream-logs")
    servers = start_all([VllmServe(bases[0], logs / "processed.log"),
                         VllmServe(bases[0], logs / "raw.log", logprobs_mode="raw_logprobs")])
    try:
        yield servers
    finally:
        stop_all(servers)


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("upstream-key") / "vllm.key"
    path.write_text(API_KEY + "\n")
    return path


def _liverl(stack, tmp_path_factory, policy_dir, url, key_file, name):
    tmp = tmp_path_factory.mktemp(name)
    # upstream before engine: each assignment is validated, and engine = "upstream" needs the urls already
    config = serving_config(module_topics(stack, f"{name}-{tmp.name}"), tmp, f"{name}-{tmp.name}",
                            upstream={"urls": [url], "api_key_file": key_file}, engine="upstream")
    register_version(config, policy_dir, (names.ALIAS_CHAMPION,))
    return ServerThread(config)


@pytest.fixture(scope="module")
def liverl_processed(stack, tmp_path_factory, bases, vllm_servers, key_file):
    with _liverl(stack, tmp_path_factory, bases[0], vllm_servers[0].url, key_file, "upstream") as server:
        yield server


@pytest.fixture(scope="module")
def liverl_raw(stack, tmp_path_factory, bases, vllm_servers, key_file):
    with _liverl(stack, tmp_path_factory, bases[0], vllm_servers[1].url, key_file, "upstream-raw") as server:
        yield server


def _chat(server, session: str, **sampling) -> dict:
    body = {"model": server.server.config.mlflow.registered_model, "max_tokens": 6,
            "messages": [{"role": "user", "content": "fix the file"}], **sampling}
    response = httpx.post(f"{server.http_base}/v1/chat/completions", json=body,
                          headers={names.META_SESSION_ID: session},
                          timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def _direct(url: str, prompt_ids: list[int], **sampling) -> dict:
    body = {"model": None, "prompt": prompt_ids, "logprobs": 0, "return_token_ids": True, **sampling}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body["model"] = httpx.get(f"{url}/v1/models", headers=headers, timeout=30).json()["data"][0]["id"]
    response = httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=120)
    response.raise_for_status()
    return response.json()["choices"][0]


@slow
def test_a_chat_through_liverl_is_recorded_with_the_upstreams_tokens_and_exact_logprobs(liverl_processed, vllm_servers,
                                                                                        bases):
    answer = _chat(liverl_processed, "s-upstream-1", temperature=1.0, seed=5)
    assert answer["choices"][0]["message"]["content"] is not None
    request_id = answer["liverl"]["request_id"]
    call = recorded_calls(liverl_processed, {request_id})[request_id]
    prompt, tokens = list(call.prompt_token_ids), list(call.completion_token_ids)
    assert 1 <= len(tokens) == len(call.completion_logprobs) and call.policy_version == "1"
    assert tokens == answer["liverl"]["token_ids"]

    # what the server itself samples for these prompt ids and this seed: the very tokens and logprobs recorded
    direct = _direct(vllm_servers[0].url, prompt, max_tokens=6, temperature=1.0, seed=5)
    assert direct["token_ids"] == tokens
    assert list(call.completion_logprobs) == pytest.approx(direct["logprobs"]["token_logprobs"], abs=1e-6)
    # and what the trainer computes for them (temperature 1, untruncated: processed = log_softmax)
    assert list(call.completion_logprobs) == pytest.approx(reference_logprobs(bases[0], prompt, tokens), abs=1e-3)


@slow
def test_a_tempered_call_records_the_distribution_it_was_sampled_from(liverl_processed, bases):
    answer = _chat(liverl_processed, "s-upstream-2", temperature=0.5, seed=7)
    request_id = answer["liverl"]["request_id"]
    call = recorded_calls(liverl_processed, {request_id})[request_id]
    prompt, tokens = list(call.prompt_token_ids), list(call.completion_token_ids)
    tempered = _reference_tempered(bases[0], prompt, tokens, 0.5)
    assert list(call.completion_logprobs) == pytest.approx(tempered, abs=1e-3)
    assert call.sampling.temperature == pytest.approx(0.5)


def _reference_tempered(policy_dir, prompt_ids, tokens, temperature):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt_ids + tokens])).logits[0] / temperature, -1)
    return [float(logprobs[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(tokens)]


@slow
def test_a_raw_logprobs_server_is_served_and_its_processed_calls_recorded_unscorable(liverl_raw, bases):
    engine = liverl_raw.server.router.champion.engine
    assert set(engine.modes.values()) == {"raw"}
    tempered = _chat(liverl_raw, "s-upstream-raw", temperature=0.7, top_p=0.9, seed=3)
    plain = _chat(liverl_raw, "s-upstream-raw", temperature=1.0, seed=3)
    assert tempered["choices"][0]["message"]["content"] is not None  # served
    ids = {tempered["liverl"]["request_id"], plain["liverl"]["request_id"]}
    calls = recorded_calls(liverl_raw, ids)
    unscorable = calls[tempered["liverl"]["request_id"]]
    assert len(unscorable.completion_token_ids) == len(unscorable.completion_logprobs) >= 1
    assert all(math.isnan(lp) for lp in unscorable.completion_logprobs)  # unknown, never guessed
    # temperature 1 untruncated: raw is what the sampler used, so the call is exact even here
    exact = calls[plain["liverl"]["request_id"]]
    assert list(exact.completion_logprobs) == pytest.approx(
        reference_logprobs(bases[0], list(exact.prompt_token_ids), list(exact.completion_token_ids)), abs=1e-3)


def _config(urls, key_file, **upstream) -> ServingConfig:
    return ServingConfig(upstream={"urls": urls, "api_key_file": key_file, **upstream}, engine="upstream")


async def _generate(engine, sampling=Sampling(temperature=1.0, max_tokens=4, seed=2)):
    return [d async for d in engine.generate([1, 5, 6, 7], sampling, "r")]


@slow
def test_a_server_that_is_down_is_routed_around(vllm_servers, bases, key_file):
    from liverl.io.processes import free_port

    live = vllm_servers[0].url
    dead = f"http://127.0.0.1:{free_port()}"

    async def run():
        engine = UpstreamEngine(bases[0], _config([live], key_file), fleet=RoundRobinUrls([dead, live]))
        await engine.start()
        try:
            results = [await _generate(engine) for _ in range(4)]  # the dead one is picked first, then skipped
            return results, engine.failure()
        finally:
            await engine.shutdown()

    results, failure = asyncio.run(run())
    assert all(r and r[-1].finish_reason == "length" for r in results)
    assert results[0] == results[1] == results[2]  # seeded: every call ran on the live server
    assert failure is None


@slow
def test_start_refuses_a_down_server_a_raw_one_when_required_and_other_base_weights(vllm_servers, bases, key_file):
    from liverl.io.processes import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RuntimeError, match=f"{dead} is not reachable"):
        asyncio.run(UpstreamEngine(bases[0], _config([dead], key_file)).start())
    raw = vllm_servers[1].url
    with pytest.raises(RuntimeError, match=f"{raw} returns raw logprobs"):
        asyncio.run(UpstreamEngine(bases[0], _config([raw], key_file, require_processed_logprobs=True)).start())
    live = vllm_servers[0].url
    with pytest.raises(RuntimeError, match=f"upstream server {live} does not serve the weights"):
        asyncio.run(UpstreamEngine(bases[1], _config([live], key_file), fleet=RoundRobinUrls([live])).start())


def test_bad_upstream_config_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="needs the vLLM servers.*serving.upstream.urls"):
        ServingConfig(engine="upstream")
    with pytest.raises(ValueError, match="'vllm-0:8000' is not an http"):
        ServingConfig(engine="upstream", upstream={"urls": ["vllm-0:8000"]})
    with pytest.raises(ValueError, match="is not an http"):
        ServingConfig(engine="upstream", upstream={"urls": ["grpc://vllm-0:8000"]})
    with pytest.raises(ValueError, match="has a path"):
        ServingConfig(engine="upstream", upstream={"urls": ["http://vllm-0:8000/v1/completions"]})
    assert ServingConfig(engine="upstream", upstream={"urls": ["http://vllm-0:8000/v1/"]}).upstream.urls == [
        "http://vllm-0:8000"]


def test_the_key_file_must_exist(tmp_path):
    from serving.engines.upstream.engine import read_api_key

    with pytest.raises(FileNotFoundError, match="api_key_file"):
        read_api_key(tmp_path / "missing")
    (tmp_path / "key").write_text("sk-1\n")
    assert read_api_key(tmp_path / "key") == "sk-1" and read_api_key(None) is None


def test_a_chunk_without_ids_or_logprobs_is_not_exact_and_its_logprobs_unknown():
    from serving.engines.upstream.wire import parse_choice

    exact = parse_choice({"token_ids": [4, 5], "logprobs": {"token_logprobs": [-1.0, -2.0]}, "finish_reason": None})
    assert exact.exact and exact.logprobs == [-1.0, -2.0]
    no_logprobs = parse_choice({"token_ids": [4, 5], "logprobs": None})
    assert not no_logprobs.exact and all(math.isnan(lp) for lp in no_logprobs.logprobs)
    short = parse_choice({"token_ids": [4, 5], "logprobs": {"token_logprobs": [-1.0]}})
    assert not short.exact and len(short.logprobs) == 2
    no_ids = parse_choice({"text": " fix", "logprobs": {"token_logprobs": [-1.0]}})
    assert not no_ids.exact and no_ids.token_ids == [] and no_ids.text == " fix"
    final = parse_choice({"token_ids": [], "logprobs": None, "finish_reason": "stop"})
    assert final.exact and final.finish_reason == "stop"


@pytest.mark.parametrize(("sampling", "exact"), [
    (Sampling(temperature=0.0, top_p=0.5, top_k=3), True),  # greedy: the untruncated temperature-1 logprobs
    (Sampling(temperature=1.0), True),  # nothing to process
    (Sampling(temperature=0.7), False),
    (Sampling(temperature=1.0, top_p=0.9), False),
    (Sampling(temperature=1.0, top_k=5), False),
])
def test_raw_logprobs_are_exact_only_where_the_sampler_changes_nothing(sampling, exact):
    from serving.engines.upstream.wire import exact_under

    assert exact_under("raw", sampling) is exact
    assert exact_under("processed", sampling)


@slow
def test_health_shows_the_upstream_servers_their_logprobs_modes_and_which_are_up(liverl_processed, liverl_raw,
                                                                                 vllm_servers):
    for server, upstream, mode in ((liverl_processed, vllm_servers[0], "processed"),
                                   (liverl_raw, vllm_servers[1], "raw")):
        response = httpx.get(f"{server.http_base}/health", timeout=30)
        assert response.status_code == 200 and response.json()["status"] == "ok"
        engine = response.json()["engines"]["champion"]
        assert engine["engine"] == "upstream" and engine["servers_up"] == 1
        assert engine["servers"] == {upstream.url: {"model": upstream.models()[0], "logprobs": mode, "up": True}}


@slow
def test_the_fleet_names_the_base_model_serving_upstream_served_model_names(vllm_servers, key_file):
    from serving.engines.upstream.engine import make_fleet

    url = vllm_servers[0].url
    served = vllm_servers[0].models()[0]

    async def base_model(name: str) -> str:
        fleet = make_fleet(_config([url], key_file, served_model=name), API_KEY)
        await fleet.start()
        try:
            return fleet.model_for(None)
        finally:
            await fleet.close()

    assert asyncio.run(base_model(served)) == served
    # a name the servers do not serve is refused, not replaced by the one they list
    with pytest.raises(ValueError, match="one and the same base model not-served"):
        asyncio.run(base_model("not-served"))
