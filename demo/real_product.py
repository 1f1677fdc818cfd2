"""The real-model product wired from the demo's config: its policy client, frozen helpers and traffic."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from demo.config import DemoLiverlConfig
from demo.product.real.frozen_helpers import FrozenHelpers
from demo.product.real.http_policy import HttpChatPolicy
from demo.product.real.traffic import run_real_traffic
from demo.product.session import SessionStats
from demo.product.traffic import TrafficStats

BASE_FOLDER = "base-smollm2"  # where `liverl train --init-from-package smollm2` converts the package's model


def base_folder(config: DemoLiverlConfig) -> Path:
    return config.stack.data_dir / BASE_FOLDER


def real_policy(config: DemoLiverlConfig) -> HttpChatPolicy:
    """Serving's OpenAI HTTP API, sampled as demo.temperature and demo.real.top_p say."""
    demo = config.demo
    scheme = "https" if config.serving.tls_cert_file else "http"
    return HttpChatPolicy(f"{scheme}://{config.serving.host}:{config.serving.http_port}",
                          api_key=demo.run.serving_api_key, temperature=demo.temperature, top_p=demo.real.top_p,
                          timeout_s=demo.policy_timeout_s, model=config.mlflow.registered_model)


def run_configured_real_traffic(config: DemoLiverlConfig, policy: HttpChatPolicy, recorder, *,
                                n_sessions: int | None = None, stop: threading.Event | None = None,
                                on_session: Callable[[SessionStats], None] | None = None) -> TrafficStats:
    """run_real_traffic with the demo section's families, concurrency, pacing, feedback delay and seed."""
    demo = config.demo
    helpers = FrozenHelpers(demo.real.helpers_folder or base_folder(config))
    return run_real_traffic(policy, helpers, recorder, n_sessions=n_sessions, duration_s=demo.duration_s,
                            seed=demo.seed, concurrency=demo.run.concurrency, families=tuple(demo.families),
                            feedback_delay_s=demo.run.feedback_delay_s, sessions_per_s=demo.run.sessions_per_s,
                            stop=stop, on_session=on_session)
