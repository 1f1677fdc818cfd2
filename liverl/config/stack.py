"""The embedded stack that `liverl up` starts on one machine: a Kafka-protocol broker and MLflow."""

from pathlib import Path
from typing import Literal

from liverl.config.section import Section


class StackConfig(Section):
    data_dir: Path = Path(".liverl")
    """Root of every local folder: broker data, MLflow store, tables, checkpoints, spools, state."""
    broker_host: str = "127.0.0.1"
    broker_port: int = 9092
    broker_storage: Literal["disk", "memory"] = "disk"
    """"disk" keeps topics across restarts (tansu on a local S3 server over a folder); "memory" does not."""
    s3_port: int = 8333
    """S3 port of the local SeaweedFS behind a "disk" broker; it also takes the next 7 ports and each +10000."""
    mlflow_host: str = "127.0.0.1"
    mlflow_port: int = 5000
    start_timeout_s: float = 90.0
    """How long `liverl up` waits for each service to answer its health check."""
