"""The embedded stack that `liverl up` starts on one machine: a Kafka-protocol broker and MLflow."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from liverl.config.section import Section


class StackConfig(Section):
    data_dir: Path = Path(".liverl")
    """Root of every local folder: broker data, MLflow store, tables, checkpoints, spools, state."""
    broker_host: str = "127.0.0.1"
    """Address the embedded broker listens on and advertises."""
    broker_port: int = Field(9092, ge=1, le=65535)
    """Kafka-protocol port of the embedded broker."""
    broker_storage: Literal["disk", "memory"] = "disk"
    """"disk" keeps topics across restarts (tansu on a local S3 server over a folder); "memory" does not."""
    s3_port: int = Field(8333, ge=1, le=65535 - 10_007)
    """S3 port of the local SeaweedFS behind a "disk" broker; it also takes the next 7 ports and each +10000."""
    mlflow_host: str = "127.0.0.1"
    """Address the embedded MLflow server listens on."""
    mlflow_port: int = Field(5000, ge=1, le=65535)
    """Port of the embedded MLflow server."""
    start_timeout_s: float = Field(90.0, gt=0.0)
    """How long `liverl up` waits for each service to answer its health check."""
