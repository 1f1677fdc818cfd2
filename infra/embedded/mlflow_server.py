"""The embedded MLflow tracking server: SQLite backend, local artifact store, served artifacts."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from liverl.io import processes


def start_mlflow(host: str, port: int, data_dir: Path, timeout_s: float = 90.0) -> subprocess.Popen:
    """Start `mlflow server` in its own process group (it spawns uvicorn and a job runner)."""
    store = data_dir / "mlflow"
    store.mkdir(parents=True, exist_ok=True)
    log = data_dir / "logs" / "mlflow.log"
    server = processes.start(
        "mlflow",
        [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port),
         "--backend-store-uri", f"sqlite:///{(store / 'mlflow.db').resolve()}",
         "--artifacts-destination", str((store / "artifacts").resolve()),
         "--serve-artifacts", "--workers", "1"],
        log,
        env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONUNBUFFERED": "1"},
    )
    try:
        processes.wait_until(lambda: mlflow_healthy(f"http://{host}:{port}"), timeout_s, "mlflow server", server,
                             log)
    except BaseException:
        processes.stop(server.pid)
        raise
    return server


def mlflow_healthy(tracking_uri: str) -> bool:
    with urllib.request.urlopen(f"{tracking_uri.rstrip('/')}/health", timeout=2) as response:
        return response.status == 200
