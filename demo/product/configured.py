"""The product wired from a LiverlConfig: what `liverl demo` calls to start traffic against the stack."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from demo.product.grpc_policy import GrpcPolicy
from demo.product.session import SessionStats
from demo.product.traffic import TrafficStats, run_traffic


def grpc_policy(config) -> GrpcPolicy:
    """The policy as served by `liverl serve` (docs/architecture.md, contract 5)."""
    demo = config.demo
    return GrpcPolicy(
        f"{config.serving.host}:{config.serving.grpc_port}",
        api_key=demo.run.serving_api_key,
        temperature=demo.temperature,
        max_new_tokens=demo.max_new_tokens,
        timeout_s=demo.policy_timeout_s,
    )


def capture_client(config, spool_dir: Path):
    """The ingest SDK's CaptureClient with the demo product's token (docs/architecture.md, contract 7)."""
    from ingest.sdk import CaptureClient

    return CaptureClient(
        target=f"{config.ingest.host}:{config.ingest.grpc_port}", token=config.demo.run.capture_token, spool_dir=spool_dir
    )


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
    """run_traffic with the demo section's families, concurrency, feedback delay and seed."""
    demo = config.demo
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
    )
