"""Pipelines fixtures: a distiller config on the test's own topics, tables and state folder."""

from __future__ import annotations

import pytest

from liverl.config import LiverlConfig


@pytest.fixture
def distill_config(fresh_topics: LiverlConfig, tmp_path, request) -> LiverlConfig:
    """Sessions are ready as soon as they end (horizon 0) and never by idleness; no MLflow audit."""
    config = fresh_topics.model_copy(deep=True)
    config.table.trajectories_uri = str(tmp_path / "trajectories")
    config.table.dead_letters_uri = str(tmp_path / "dead_letters")
    config.pipelines.reward_horizon_s = 0.0
    config.pipelines.idle_timeout_s = 10 * 24 * 3600.0
    config.pipelines.read_timeout_s = 20.0
    config.pipelines.audit = False
    config.mlflow.audit_experiment = f"audit-{request.node.name[:40]}"
    return config
