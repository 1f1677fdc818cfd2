"""Serving fixtures: policies registered in the real MLflow server, and a server run on its own loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from liverl.config import LiverlConfig
from liverl.contracts import names
from tests.conftest import opened, with_topics

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


def register_version(config: LiverlConfig, policy_dir: Path, aliases: tuple[str, ...] = (),
                     signed: bool = True) -> str:
    """Log the policy folder (docs/architecture.md, contract 6) under "policy" in a run, create a version from it,
    sign it as the trainer's gate does (unless signed=False), set aliases."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = config.mlflow.tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("serving-tests")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("serving-tests")
    run = client.create_run(experiment_id)
    client.log_artifacts(run.info.run_id, str(policy_dir), names.POLICY_ARTIFACT_PATH)
    client.set_terminated(run.info.run_id)
    name = config.mlflow.registered_model
    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # exists
    version = client.create_model_version(name, f"runs:/{run.info.run_id}/{names.POLICY_ARTIFACT_PATH}",
                                          run_id=run.info.run_id)
    if signed:
        sign_as_the_gate(config, str(version.version), policy_dir)
    for alias in aliases:
        client.set_registered_model_alias(name, alias, version.version)
    return str(version.version)


def reference_logprobs(policy_dir: Path, prompt_ids: list[int], tokens: list[int]) -> list[float]:
    """The trainer's logprobs of tokens after prompt_ids: a plain fp32 forward pass, temperature 1, untruncated."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt_ids + tokens])).logits[0], -1)
    return [float(logprobs[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(tokens)]


def wait_for(predicate, timeout_s: float = 120.0, what: str = "condition", poll_s: float = 0.05) -> None:
    """Poll predicate until it holds; fail naming `what` after timeout_s (a ceiling, never the expected time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def sign_as_the_gate(config: LiverlConfig, version: str, policy_dir: Path) -> None:
    """A passing verdict signed with the trainer's key of this config (serving verifies with its public half)."""
    from liverl.io.registry import ModelRegistry
    from liverl.io.signing import folder_digest
    from trainer.io.signing import sign_pass

    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    sign_pass(registry, version, folder_digest(policy_dir), config.trainer.signing_key_file)
    registry.set_tag(version, names.TAG_GATE_DECISION, "pass")


def set_alias(config: LiverlConfig, alias: str, version: str) -> None:
    from mlflow import MlflowClient

    uri = config.mlflow.tracking_uri
    MlflowClient(tracking_uri=uri, registry_uri=uri).set_registered_model_alias(
        config.mlflow.registered_model, alias, version)


def version_tags(config: LiverlConfig, version: str) -> dict[str, str]:
    from mlflow import MlflowClient

    uri = config.mlflow.tracking_uri
    return MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version(
        config.mlflow.registered_model, version).tags


class ServerThread:
    """A PolicyServer on an event loop of its own thread, so sync test code (and sync clients) can call it."""

    def __init__(self, config: LiverlConfig):
        from serving.server import PolicyServer

        self.lines: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.server = PolicyServer(config, say=self.lines.append)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        try:
            self.call(self.server.start(), timeout_s=300)
        except BaseException:
            self.__exit__()
            raise
        return self

    def call(self, coroutine, timeout_s: float = 300):
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def __exit__(self, *exc) -> None:
        try:
            self.call(self.server.stop(grace_s=5), timeout_s=120)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.server.http_port}"


def serving_config(base: LiverlConfig, tmp_path: Path, model: str, **serving) -> LiverlConfig:
    """base with a registered-model name of its own, free ports and a work folder under tmp_path."""
    config = base.model_copy(deep=True)
    config.mlflow.registered_model = model
    s = config.serving
    s.grpc_port = 0
    s.http_port = 0
    s.metrics_port = 0
    s.work_dir = tmp_path / "serving"
    s.engine = "hf"
    s.watch_interval_s = 0.5
    s.min_swap_interval_s = 0.0
    for key, value in serving.items():
        setattr(s, key, value)
    return config


@pytest.fixture(scope="session")
def second_policy_dir(tmp_path_factory) -> Path:
    """Same architecture and tokenizer as tiny_policy_dir, different weights (seed)."""
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("policy") / "second", WORDS, seed=1)


@pytest.fixture(scope="session")
def broken_policy_dir(tmp_path_factory, tiny_policy_dir) -> Path:
    """A policy folder whose weights file is corrupt: it must fail to load and never take traffic."""
    import shutil

    out = tmp_path_factory.mktemp("policy") / "broken"
    shutil.copytree(tiny_policy_dir, out)
    (out / "model.safetensors").write_bytes(b"not a safetensors file")
    return out


def read_topic(config: LiverlConfig, topic: str, expect: int, timeout_s: float = 30.0, until=None) -> list:
    """Records of topic (all partitions) from the start, until `expect` arrived, until(records) holds,
    or timeout_s passed."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=1000)
    try:
        partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        records, deadline = [], time.monotonic() + timeout_s
        while len(records) < expect and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
            if until is not None and until(opened(config, records)):
                break
        return opened(config, records)
    finally:
        consumer.close()


def recorded_calls(server: ServerThread, request_ids: set[str]) -> dict:
    """request id -> its recorded ModelCall read back from Kafka, with the session id of its Kafka key checked
    against the body."""
    from liverl.v1 import model_call_pb2
    from tests.conftest import stored_key

    config = server.server.config
    server.server.recorder.flush(30)
    wanted = [r.encode() for r in request_ids]
    records = read_topic(config, config.kafka.model_calls_topic, expect=100_000,
                         until=lambda got: all(any(w in r.value for r in got) for w in wanted))
    found = {}
    for record in records:
        call = model_call_pb2.ModelCall.FromString(record.value)
        if call.request_id in request_ids:
            assert record.key == stored_key(config, call.tenant_id, call.session_id)
            found[call.request_id] = call
    return found


def module_topics(stack: LiverlConfig, name: str) -> LiverlConfig:
    """stack with topic names of its own (for servers shared by several tests)."""
    return with_topics(stack, name, partitions=1)


@pytest.fixture(scope="session")
def api_server(stack, tiny_policy_dir, tmp_path_factory):
    """An hf-engine server following "champion" of a model with one version, keys configured."""
    config = module_topics(stack, f"api-{tmp_path_factory.mktemp('n').name}")
    tmp = tmp_path_factory.mktemp("api")
    config = serving_config(config, tmp, f"api-{tmp.name}", api_keys={"user-key": {"tenant": "acme"}},
                            admin_api_keys=["admin-key"])
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(config) as server:
        yield server


HOSTILE_KEYS = {"acme-key": {"tenant": "acme"}, "globex-key": {"tenant": "globex"},
                "acme-sub-key": {"tenant": "acme", "roles": ["subagent"]}}


@pytest.fixture(scope="session")
def hostile_server(stack, tiny_policy_dir, tmp_path_factory):
    """A fixed-folder hf-engine server with tenant keys, small limits and recording, for hostile clients."""
    tmp = tmp_path_factory.mktemp("hostile")
    config = serving_config(module_topics(stack, f"hostile-{tmp.name}"), tmp, f"hostile-{tmp.name}",
                            policy_dir=tiny_policy_dir, api_keys=HOSTILE_KEYS, admin_api_keys=["admin-key"],
                            rate_limit_per_s=1e6, rate_limit_burst=1_000_000, max_request_bytes=2 << 20,
                            body_timeout_s=2.0, default_max_tokens=4)
    with ServerThread(config) as server:
        yield server


def rejected_total(server: ServerThread) -> float:
    """Requests refused so far, over every reason."""
    return sum(s.value for m in server.server.metrics.registry.collect() if m.name == "liverl_serving_rejected_requests"
               for s in m.samples if s.name.endswith("_total"))
