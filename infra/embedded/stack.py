"""`liverl up / down / status`: start, record, show and stop the embedded stack.

The record (<data_dir>/stack.json) holds the PID of every process started, so `down` stops exactly
those, by PID, and `status` can tell a live stack from a stale record.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from infra.embedded.broker import kafka_reachable, s3_ports, start_s3, start_tansu
from infra.embedded.mlflow_server import mlflow_healthy, start_mlflow
from infra.embedded.topics import ensure_topics
from liverl.config import LiverlConfig
from liverl.io import processes


def record_path(config: LiverlConfig) -> Path:
    return config.stack.data_dir / "stack.json"


def read_record(config: LiverlConfig) -> list[processes.Started]:
    path = record_path(config)
    if not path.exists():
        return []
    return [processes.Started(**item) for item in json.loads(path.read_text())["processes"]]


def _write_record(config: LiverlConfig, started: list[processes.Started]) -> None:
    path = record_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"started_at": time.time(), "processes": [asdict(item) for item in started]}
    path.write_text(json.dumps(payload, indent=2))


def up(config: LiverlConfig, say=print) -> list[processes.Started]:
    """Start whatever of the stack is not running; idempotent. Returns the live processes."""
    stack = config.stack
    live = [item for item in read_record(config) if processes.alive(item.pid)]
    names = {item.name for item in live}
    logs = stack.data_dir / "logs"
    started = list(live)
    try:
        s3_address = None
        if stack.broker_storage == "disk":
            s3_address = f"http://{stack.broker_host}:{stack.s3_port}"
            if "broker-s3" not in names:
                for port in s3_ports(stack.s3_port):
                    _require_free(stack.broker_host, port, "stack.s3_port")
                s3 = start_s3(stack.broker_host, stack.s3_port, stack.data_dir, stack.start_timeout_s)
                started.append(processes.Started("broker-s3", s3.pid, str(logs / "seaweedfs.log"), s3_address))
                _write_record(config, started)
        if "broker" not in names:
            _require_free(stack.broker_host, stack.broker_port, "stack.broker_port")
            broker = start_tansu(stack.broker_host, stack.broker_port, stack.data_dir, s3_address,
                                 stack.start_timeout_s)
            bootstrap = f"{stack.broker_host}:{stack.broker_port}"
            started.append(processes.Started("broker", broker.pid, str(logs / "tansu.log"), bootstrap))
            _write_record(config, started)
            say(f"broker   up at {bootstrap} ({stack.broker_storage} storage)")
        created = ensure_topics(config.kafka)
        if created:
            say(f"topics   created {', '.join(created)}")
        if "mlflow" not in names:
            _require_free(stack.mlflow_host, stack.mlflow_port, "stack.mlflow_port")
            server = start_mlflow(stack.mlflow_host, stack.mlflow_port, stack.data_dir, stack.start_timeout_s)
            uri = f"http://{stack.mlflow_host}:{stack.mlflow_port}"
            started.append(processes.Started("mlflow", server.pid, str(logs / "mlflow.log"), uri))
            _write_record(config, started)
            say(f"mlflow   up at {uri}")
    except BaseException:
        _write_record(config, started)  # whatever did start stays recorded, so `down` can stop it
        raise
    return started


def _require_free(host: str, port: int, setting: str) -> None:
    if processes.port_open(host, port):
        raise RuntimeError(f"port {port} is taken by another process; set --{setting} to a free port")


def down(config: LiverlConfig, say=print) -> int:
    """Stop every recorded process by PID (MLflow first: it writes to nothing we stop after)."""
    stopped = 0
    for item in sorted(read_record(config), key=lambda it: it.name != "mlflow"):
        if processes.stop(item.pid):
            stopped += 1
            say(f"stopped  {item.name} (pid {item.pid})")
    path = record_path(config)
    if path.exists():
        path.unlink()
    return stopped


def status(config: LiverlConfig) -> list[dict]:
    """One row per recorded process: is it alive, and does it answer its health check."""
    rows = []
    for item in read_record(config):
        healthy = False
        if processes.alive(item.pid):
            try:
                if item.name == "broker":
                    healthy = kafka_reachable(item.address)
                elif item.name == "mlflow":
                    healthy = mlflow_healthy(item.address)
                else:
                    host, port = item.address.rsplit("//", 1)[-1].rsplit(":", 1)
                    healthy = processes.port_open(host, int(port))
            except Exception:
                healthy = False
        rows.append({**asdict(item), "alive": processes.alive(item.pid), "healthy": healthy})
    return rows
