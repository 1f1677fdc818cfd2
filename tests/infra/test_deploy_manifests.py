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


def _liverl_command(container) -> list[str]:
    """The container's `liverl ...` command, after the rank launcher where one starts it (torchrun --no-python)."""
    command = container["command"]
    if command[0] == "torchrun":
        assert "--no-python" in command, "torchrun must start the liverl executable: add --no-python"
        return command[command.index("--no-python") + 1:]
    return command


def test_every_workload_runs_a_liverl_command_with_the_mounted_config():
    containers = list(_containers())
    assert {name for name, _ in containers} == {"capture.yaml", "serving.yaml", "distill.yaml", "trainer.yaml"}
    for name, container in containers:
        command = _liverl_command(container)
        assert command[0] == "liverl" and command[1] in COMMANDS, name
        assert "/etc/liverl/liverl.toml" in command, name


def test_the_trainer_ranks_are_one_job_not_independent_trainers():
    """Independent pods would each be a world of one and race on `champion`: the pods' torchrun agents must meet
    in one rendezvous (through the headless service) with as many nodes as pods, and share one checkpoint folder."""
    documents = [d for d in yaml.safe_load_all((ROOT / "infra" / "deploy" / "trainer.yaml").read_text()) if d]
    [trainer] = [d for d in documents if d["kind"] == "StatefulSet"]
    spec = trainer["spec"]
    [service] = [d for d in documents if d["kind"] == "Service" and d["metadata"]["name"] == spec["serviceName"]]
    assert service["spec"]["clusterIP"] == "None"  # headless: the pods reach each other by name
    assert spec.get("podManagementPolicy") == "Parallel"  # the rendezvous waits for every node
    [container] = spec["template"]["spec"]["containers"]
    command = container["command"]
    assert command[0] == "torchrun" and _liverl_command(container)[:2] == ["liverl", "train"]
    launcher = command[: command.index("--no-python")]
    flags = dict(zip(launcher[1::2], launcher[2::2]))
    assert int(flags["--nnodes"]) == spec["replicas"]
    assert int(flags["--nproc-per-node"]) == container["resources"]["limits"]["nvidia.com/gpu"]
    assert flags["--rdzv-endpoint"].startswith(f"{trainer['metadata']['name']}-0.{spec['serviceName']}:")
    assert "volumeClaimTemplates" not in spec  # one volume per pod would split the checkpoint between nodes
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}
    [claim] = [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    assert claims["checkpoints"] == claim["metadata"]["name"] and claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_production_config_validates_and_points_away_from_the_embedded_stack():
    config = load_config(ROOT / "configs" / "production.toml", environ={})
    assert "127.0.0.1" not in config.kafka.bootstrap_servers
    assert config.mlflow.tracking_uri.startswith("https://")
    assert config.kafka.replication_factor == 3
