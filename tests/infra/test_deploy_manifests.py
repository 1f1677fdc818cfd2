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


def _documents():
    for path in sorted((ROOT / "infra" / "deploy").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield path.name, document


def _workloads():
    return [(name, d) for name, d in _documents() if d["kind"] in ("Deployment", "StatefulSet")]


def test_every_pod_runs_unprivileged_with_limits():
    for name, workload in _workloads():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind]), (name, kind)
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts, f"{name}: a read-only root needs a writable /tmp volume"


def test_each_stage_reads_only_its_own_secret_keys_into_known_settings():
    """No pod loads a whole secret (envFrom); each takes named keys of its own stage's secret, into environment
    variables that name real settings (a misspelt LIVERL_ variable would be ignored silently)."""
    from liverl.config import LiverlConfig

    for name, workload in _workloads():
        stage = name.removesuffix(".yaml")
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert "envFrom" not in container, f"{name} loads a whole secret: name the keys it needs"
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == f"liverl-{stage}-secrets", (name, variable["name"])
                if variable["name"].startswith("LIVERL_"):
                    model = LiverlConfig
                    for part in variable["name"].removeprefix("LIVERL_").lower().split("__"):
                        assert part in model.model_fields, f"{name}: {variable['name']} names no setting"
                        model = model.model_fields[part].annotation
                        model = next((a for a in getattr(model, "__args__", ()) if hasattr(a, "model_fields")),
                                     model)


def test_serving_speaks_tls_only_with_its_certificate_mounted():
    [(_, serving)] = [(n, w) for n, w in _workloads() if n == "serving.yaml"]
    pod = serving["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["LIVERL_SERVING__TLS_CERT_FILE"].startswith(mounts["tls"] + "/")
    assert env["LIVERL_SERVING__TLS_KEY_FILE"].startswith(mounts["tls"] + "/")
    assert volumes["tls"]["secret"]["secretName"] == "liverl-serving-tls"


def test_network_policies_deny_by_default_and_open_each_port_to_named_peers_only():
    policies = [d for _, d in _documents() if d["kind"] == "NetworkPolicy"]
    [deny] = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in deny["spec"]
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), f"{policy['metadata']['name']}: an ingress rule open to every source"
    for name, workload in _workloads():
        app = workload["spec"]["template"]["metadata"]["labels"]["app"]
        mine = [p for p in policies if p["spec"]["podSelector"].get("matchLabels", {}).get("app") == app]
        allowed = set()
        for policy in mine:
            for rule in policy["spec"].get("ingress", []):
                ports = {port["port"] for port in rule.get("ports", [])}
                allowed |= ports or {"any"}
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for port in container.get("ports", []):
                assert port["containerPort"] in allowed or "any" in allowed, (name, port)
    [ranks] = [p for p in policies if p["metadata"]["name"] == "liverl-trainer-ranks"]
    for rule in ranks["spec"]["ingress"]:
        assert rule["from"] == [{"podSelector": {"matchLabels": {"app": "liverl-trainer"}}}]
