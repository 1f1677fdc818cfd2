"""`liverl serve` as the demo runs it: a subprocess that says when it is ready and stops on SIGTERM."""

import re
import signal
import subprocess
import sys
import time

import grpc
import httpx
import pytest

from liverl.contracts import names
from liverl.io.processes import start, stop
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import register_version


def _wait_ready(process: subprocess.Popen, log, timeout_s: float) -> re.Match:
    """The ready line's match (grpc, http, version), once serving printed it; fails with the log if it never does."""
    ready = None
    deadline = time.monotonic() + timeout_s
    while ready is None and time.monotonic() < deadline and process.poll() is None:
        ready = re.search(r"serving ready grpc=(\S+) http=(\S+) version=(\S*)", log.read_text())
        time.sleep(0.2)
    assert ready, log.read_text()[-3000:]
    return ready


def test_serve_prints_ready_serves_and_stops_on_sigterm(fresh_topics, tiny_policy_dir, tmp_path):
    config = fresh_topics
    model = f"cli-{tmp_path.name}"
    register_version(config.model_copy(update={"mlflow": config.mlflow.model_copy(
        update={"registered_model": model})}), tiny_policy_dir, (names.ALIAS_CHAMPION,))
    from liverl.io.processes import free_port

    metrics_port = free_port()
    argv = [sys.executable, "-m", "liverl.cli", "serve",
            "--serving.engine", "hf", "--serving.grpc_port", "0", "--serving.http_port", "0",
            "--serving.metrics_port", str(metrics_port), "--serving.watch_interval_s", "1",
            "--stack.data_dir", str(tmp_path / "data"),
            "--serving.verify_key_file", str(config.serving.verify_key_file),  # the key register_version signs with
            "--mlflow.tracking_uri", config.mlflow.tracking_uri, "--mlflow.registered_model", model,
            "--kafka.bootstrap_servers", config.kafka.bootstrap_servers,
            "--kafka.model_calls_topic", config.kafka.model_calls_topic,
            "--kafka.dead_letters_topic", config.kafka.dead_letters_topic]
    log = tmp_path / "serve.log"
    process = start("serve", argv, log)
    try:
        ready = _wait_ready(process, log, 180)
        assert ready.group(3) == "1"
        with grpc.insecure_channel(ready.group(1)) as channel:
            stub = serving_pb2_grpc.PolicyServiceStub(channel)
            info = stub.ModelInfo(serving_pb2.ModelInfoRequest(), timeout=10)
            stub.Generate(serving_pb2.GenerateRequest(prompt="fix the file"), timeout=60)
        assert info.policy_version == "1" and info.model_name == model
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        assert 'liverl_serving_requests_total{api="grpc",outcome="ok",version="1"} 1.0' in metrics
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert "serving stopped" in log.read_text()
    finally:
        stop(process.pid)  # its whole group: a vLLM engine core outlives a killed server


@pytest.mark.slow
def test_serve_exits_nonzero_when_its_vllm_engine_dies(tmp_path):
    """A dead vLLM engine core (here: killed) fails every request; the server says so on /health and exits 1 so
    that a supervisor starts a fresh one, instead of answering 500 forever."""
    import psutil

    from tests.serving.lora_adapters import build_base

    argv = [sys.executable, "-m", "liverl.cli", "serve", "--policy-dir", str(build_base(tmp_path / "base")),
            "--serving.engine", "vllm", "--serving.max_model_len", "128", "--serving.gpu_memory_utilization", "0.08",
            "--serving.grpc_port", "0", "--serving.http_port", "0", "--serving.metrics_port", "0",
            "--serving.record", "false", "--serving.watch_interval_s", "0.5", "--stack.data_dir", str(tmp_path / "d")]
    log = tmp_path / "serve.log"
    process = start("serve", argv, log)
    try:
        ready = _wait_ready(process, log, 600)  # a ceiling: vLLM starts in about a minute on a quiet machine
        assert httpx.get(f"http://{ready.group(2)}/health", timeout=10).status_code == 200
        cores = [p for p in psutil.Process(process.pid).children(recursive=True) if "EngineCore" in p.name()]
        assert cores, [p.name() for p in psutil.Process(process.pid).children(recursive=True)]
        for core in cores:
            core.kill()
        assert process.wait(timeout=120) == 1
        assert "serving engine-dead" in log.read_text() and "serving stopped" in log.read_text()
    finally:
        stop(process.pid)  # its whole group: a vLLM engine core outlives a killed server
