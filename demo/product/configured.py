"""The product wired from the demo's config: what `liverl demo` calls to start traffic against the stack.

The toy policy is called through serving's gRPC API (grpc_policy), a chat model (demo.policy = "smollm2") through
its OpenAI HTTP API (chat_policy), with the orchestrator's frozen helpers the converted base (base_folder).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from demo.product.grpc_policy import GrpcPolicy
from demo.product.http_policy import HttpChatPolicy
from demo.product.session import SessionStats
from demo.product.traffic import TrafficStats, run_traffic

BASE_FOLDER = "base-smollm2"  # where `liverl train --init-from-package smollm2` converts the package's model


def base_folder(config) -> Path:
    return config.stack.data_dir / BASE_FOLDER


def grpc_policy(config, api_key: str | None = None) -> GrpcPolicy:
    """The policy as served by `liverl serve` (docs/architecture.md, contract 5); api_key: a tenant's, not the
    product's own (demo.run.serving_api_key)."""
    demo = config.demo
    return GrpcPolicy(
        f"{config.serving.host}:{config.serving.grpc_port}",
        api_key=demo.run.serving_api_key if api_key is None else api_key,
        temperature=demo.temperature,
        max_new_tokens=demo.max_new_tokens,
        timeout_s=demo.policy_timeout_s,
    )


def chat_policy(config) -> HttpChatPolicy:
    """Serving's OpenAI HTTP API, sampled as demo.temperature and demo.real.top_p say."""
    demo = config.demo
    scheme = "https" if config.serving.tls_cert_file else "http"
    return HttpChatPolicy(f"{scheme}://{config.serving.host}:{config.serving.http_port}",
                          api_key=demo.run.serving_api_key, temperature=demo.temperature, top_p=demo.real.top_p,
                          timeout_s=demo.policy_timeout_s, model=config.mlflow.registered_model)


def configured_policy(config) -> GrpcPolicy | HttpChatPolicy:
    """The client of the policy demo.policy names."""
    return chat_policy(config) if config.demo.policy == "smollm2" else grpc_policy(config)


def capture_client(config, spool_dir: Path, token: str | None = None):
    """The ingest SDK's CaptureClient with the demo product's token, or a tenant's (docs/architecture.md, contract
    7)."""
    from ingest.sdk import CaptureClient

    return CaptureClient(target=f"{config.ingest.host}:{config.ingest.grpc_port}",
                         token=config.demo.run.capture_token if token is None else token, spool_dir=spool_dir)


def run_configured_traffic(
    config,
    policy,
    recorder,
    *,
    duration_s: float | None = None,
    n_sessions: int | None = None,
    stop: threading.Event | None = None,
    on_session: Callable[[SessionStats], None] | None = None,
    seed_offset: int = 0,
) -> TrafficStats:
    """run_traffic with the demo section's families, concurrency, feedback delay and seed; with demo.policy
    "smollm2", on the chat tasks with the frozen helpers (demo.real.helpers_folder, by default the base)."""
    demo = config.demo
    helpers = None
    if demo.policy == "smollm2":
        from demo.product.chat_session import FrozenHelpers

        helpers = FrozenHelpers(demo.real.helpers_folder or base_folder(config))
    return run_traffic(
        policy,
        recorder,
        n_sessions=n_sessions,
        duration_s=duration_s,
        seed=demo.seed + seed_offset,
        concurrency=demo.run.concurrency,
        families=tuple(demo.families),
        feedback_delay_s=demo.run.feedback_delay_s,
        subagents_call_policy=demo.subagents_call_policy,
        sessions_per_s=demo.run.sessions_per_s,
        stop=stop,
        on_session=on_session,
        helpers=helpers,
        training_draw=demo.real.training_draw,
    )
