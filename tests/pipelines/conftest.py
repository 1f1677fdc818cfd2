"""Pipelines fixtures: a distiller config on the test's own topics, tables and state folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from liverl.config import LiverlConfig


def distiller_on(topics: LiverlConfig, folder: Path, name: str) -> LiverlConfig:
    """Sessions are ready as soon as they end (horizon 0) and never by idleness; tables under folder; no audit."""
    config = topics.model_copy(deep=True)
    config.table.trajectories_uri = str(folder / "trajectories")
    config.table.dead_letters_uri = str(folder / "dead_letters")
    config.pipelines.reward_horizon_s = 0.0
    config.pipelines.idle_timeout_s = 10 * 24 * 3600.0
    config.pipelines.read_timeout_s = 20.0
    config.pipelines.audit = False
    config.mlflow.audit_experiment = f"audit-{name[:40]}"
    return config


@pytest.fixture
def distill_config(fresh_topics: LiverlConfig, tmp_path, request) -> LiverlConfig:
    return distiller_on(fresh_topics, tmp_path, request.node.name)
