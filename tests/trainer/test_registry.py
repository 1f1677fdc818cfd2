"""The trainer's start path: a registry that is down is an outage, never "register a base policy first"."""

from __future__ import annotations

import uuid

import pytest

from liverl.config import LiverlConfig, load_config
from liverl.io.processes import free_port
from trainer.io.registry import Registry, RegistryUnavailable
from trainer.loop import Trainer


def _config(tracking_uri: str, tmp_path) -> LiverlConfig:
    return load_config(None, overrides=[
        "--mlflow.tracking_uri", tracking_uri,
        "--mlflow.registered_model", f"policy-{uuid.uuid4().hex[:8]}",
        "--table.trajectories_uri", str(tmp_path / "table"),
        "--trainer.checkpoint_dir", str(tmp_path / "checkpoints"),
    ], environ={})


def test_a_registry_that_is_down_stops_the_trainer_with_registry_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # one attempt, not minutes of retries
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RegistryUnavailable) as raised:
        Trainer(_config(uri, tmp_path), say=lambda *_: None).start()
    assert uri in str(raised.value) and "base policy" not in str(raised.value)


def test_a_registry_without_a_champion_asks_for_a_base_policy(stack, tmp_path):
    config = _config(stack.mlflow.tracking_uri, tmp_path)
    assert Registry(config.mlflow).alias_version("champion") is None
    with pytest.raises(RuntimeError, match="register a base policy first"):
        Trainer(config, say=lambda *_: None).start()
