"""One live loop for the agent-framework tests: the embedded stack, SmolLM2-135M-Instruct registered as the base
and served by `liverl serve` (hf engine) from the registry, and a capture service, all shared by the module.

What the frameworks are told, and why: a 135M model does not call tools on its own. Greedy, it does follow a
one-shot example in the agent's own instructions (STEER) when the task asks it to repeat the call (TASK), and
after a tool result that tells it what to say (the tool's return value) it answers in plain text. The
frameworks themselves are not changed: only their documented settings (instructions, temperature, max tokens,
turn limits) are used.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

API_KEY = "agent-key"
TENANT = "acme"
CAPTURE_TOKEN = "acme-token"
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
STEER = f"You only ever output JSON. Example:\nUser: New task: weather in Paris?\nAssistant: {json.dumps(CALL)}"
TASK = f"Repeat after me: {json.dumps(CALL)}"
MAX_TOKENS = 40  # the call is ~20 tokens, the answer ~8
# Serving's cap for a request that names none (the README's example does not): room for an unsteered answer, which
# the Agents SDK refuses as "incomplete" when it is cut off
DEFAULT_MAX_TOKENS = 192


def weather(city: str) -> str:
    """The tool every framework offers: its answer also tells the model what to say next."""
    return f"Sunny. Now say: The weather in {city} is sunny."


@dataclass
class AgentLoop:
    """The running loop and what the framework tests recorded in it (framework -> its session id)."""

    config: object
    serving: object
    capture_server: object
    base_folder: Path
    sessions: dict[str, str] = field(default_factory=dict)
    tool_runs: dict[str, int] = field(default_factory=dict)  # framework -> how often its tool ran
    seen: set[str] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"{self.serving.http_base}/v1"

    @property
    def model(self) -> str:
        return self.config.mlflow.registered_model

    def new_calls(self) -> dict[str, list]:
        """The ModelCalls recorded since the last look, by session id, in the order served."""
        from liverl.v1 import model_call_pb2
        from tests.serving.conftest import read_topic

        assert self.serving.server.recorder.flush(30)
        records = read_topic(self.config, self.config.kafka.model_calls_topic, expect=10**6, timeout_s=5)
        calls: dict[str, list] = {}
        for record in records:
            call = model_call_pb2.ModelCall.FromString(record.value)
            if call.request_id not in self.seen:
                self.seen.add(call.request_id)
                calls.setdefault(call.session_id, []).append(call)
        return {s: sorted(c, key=lambda call: call.request_time_ms) for s, c in calls.items()}

    def close_session(self, framework: str, session_id: str) -> None:
        """What a product reports for a run serving recorded without any liverl header: its outcome, through the
        SDK's link_completion (docs/capture.md), so the session is a trainable trajectory."""
        from ingest.sdk import CaptureClient

        client = CaptureClient(self.capture_server.grpc_address, CAPTURE_TOKEN, None)
        session = client.link_completion(session_id, task_family="weather", task_id=framework)
        session.outcome(success=True, score=1.0, detail=framework)
        session.end("completed")
        assert client.flush(timeout_s=30), client.stats()
        client.close()
        self.sessions[framework] = session_id


@pytest.fixture(scope="module")
def agent_loop(request, tmp_path_factory, smollm2_converted) -> AgentLoop:
    from infra.embedded.stack import down, up
    from ingest.service import CaptureServer
    from tests.conftest import module_folder, stack_config
    from tests.ingest.conftest import capture_config
    from tests.serving.conftest import ServerThread, serving_config
    from trainer.io.base_policy import register_base
    from trainer.io.pretrained import provenance_tags

    data_dir: Path = module_folder(request, tmp_path_factory, "agents")
    config = stack_config(data_dir)
    config.pipelines.reward_horizon_s = 0.0
    config.pipelines.idle_timeout_s = 1.0
    config.pipelines.read_timeout_s = 20.0
    config.pipelines.audit = True  # every trajectory an MLflow trace
    config.pipelines.trace_sample_rate = 1.0
    folder, provenance = smollm2_converted
    hub = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({name: "1" for name in hub})  # a framework reaching for a hub fails here, loudly
    up(config, say=lambda *_: None)
    capture = CaptureServer(capture_config(config, data_dir / "capture",
                                           tenant_tokens={TENANT: CAPTURE_TOKEN})).start()
    try:
        register_base(config, folder, say=lambda *_: None, provenance=provenance_tags(provenance))
        served = serving_config(config, data_dir, config.mlflow.registered_model,
                                api_keys={API_KEY: {"tenant": TENANT}}, default_max_tokens=DEFAULT_MAX_TOKENS,
                                max_model_len=2048)
        with ServerThread(served) as serving:
            deadline = time.monotonic() + 300
            while serving.server.router.champion is None and time.monotonic() < deadline:
                time.sleep(0.5)
            yield AgentLoop(config, serving, capture, folder)
    finally:
        capture.stop()
        down(config, say=lambda *_: None)
        for name, value in hub.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
