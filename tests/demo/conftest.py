"""Demo fixtures: one fitted base policy shared by every demo test (a short fit keeps it cheap)."""

from __future__ import annotations

from pathlib import Path

import pytest

TEST_FIT_STEPS = 300  # enough for calls that parse; the demo fits longer


@pytest.fixture(scope="session")
def demo_base_policy(tmp_path_factory) -> Path:
    import torch

    from demo.policy import bootstrap_base_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the fit is tiny: one thread leaves the other core to the rest
    try:
        return bootstrap_base_policy(tmp_path_factory.mktemp("demo-policy") / "base", seed=0, fit_steps=TEST_FIT_STEPS)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def capture_service(fresh_topics, tmp_path):
    """A running capture service (the ingest stage) on the test's own topics, tenant demo / demo-token."""
    from ingest.service import CaptureServer
    from liverl.io.processes import free_port

    config = fresh_topics.model_copy(deep=True)
    config.ingest.grpc_port = free_port()
    config.ingest.http_port = free_port()
    config.ingest.metrics_port = 0
    config.ingest.spool_dir = tmp_path / "capture-spool"
    config.ingest.tenant_tokens = {"demo": "demo-token"}
    server = CaptureServer(config).start()
    try:
        yield config
    finally:
        server.stop()
