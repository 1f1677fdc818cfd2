"""The deployment manifests parse, run only `liverl` commands we ship, and use a config that validates."""

from pathlib import Path

import yaml

from liverl.cli import COMMANDS
from liverl.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _containers():
    for path in sorted((ROOT / "infra" / "deploy").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document["kind"] in ("Deployment", "StatefulSet"):
                for container in document["spec"]["template"]["spec"]["containers"]:
                    yield path.name, container


def test_every_workload_runs_a_liverl_command_with_the_mounted_config():
    containers = list(_containers())
    assert {name for name, _ in containers} == {"capture.yaml", "serving.yaml", "distill.yaml", "trainer.yaml"}
    for name, container in containers:
        command = container["command"]
        assert command[0] == "liverl" and command[1] in COMMANDS, name
        assert "/etc/liverl/liverl.toml" in command, name


def test_production_config_validates_and_points_away_from_the_embedded_stack():
    config = load_config(ROOT / "configs" / "production.toml", environ={})
    assert "127.0.0.1" not in config.kafka.bootstrap_servers
    assert config.mlflow.tracking_uri.startswith("https://")
    assert config.kafka.replication_factor == 3
