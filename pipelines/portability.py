"""What a Beam worker on another machine can see: the driver's checks and the files it ships with the graph.

On Flink, Dataflow or Spark the workers are other machines. They cannot read the driver's local disk, so

- the state folder (plans, staged outputs, pending sessions) must be shared storage both can reach:
  `check_shared_storage` stops the batch before it runs when a remote runner is given a local path;
- a client file the Kafka settings name by path (the SSL CA, a client certificate) travels inside the graph:
  `ship_client_files` reads it on the driver, `unpack_client_files` writes it to a private temporary file on
  the worker when the reader starts (`ReadOffsetRange.setup`).

Everything else a worker needs is in the graph itself (the offset ranges, the batch clock, the reward config).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import NamedTuple

# kafka-python arguments that name a local file.
CLIENT_FILE_ARGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "embed")


class ShippedFile(NamedTuple):
    """A driver-local file carried in the graph: its original path (for messages) and its bytes."""

    path: str
    content: bytes


def is_remote(runner: str, beam_options: list[str]) -> bool:
    """True when the runner's workers may run on other machines than the driver.

    DirectRunner, FnApiRunner and Prism are in-process or local; Dataflow is always remote; Flink, Spark and
    the PortableRunner are local only with an embedded master or a job endpoint on this host.
    """
    options = dict(option.lstrip("-").split("=", 1) for option in beam_options if "=" in option)
    name = runner.rsplit(".", 1)[-1]
    if name == "DataflowRunner":
        return True
    if name == "FlinkRunner":
        return options.get("flink_master", "[auto]") not in ("[auto]", "[local]")
    if name == "SparkRunner":
        return not options.get("spark_master_url", "local[4]").startswith("local")
    if name == "PortableRunner":
        host = options.get("job_endpoint", "embed").rsplit(":", 1)[0]
        return host not in LOCAL_HOSTS or options.get("environment_type", "").upper() == "DOCKER"
    return False


def is_local_uri(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def check_shared_storage(runner: str, beam_options: list[str], state_uri: str) -> None:
    """Refuse a local state folder on a runner whose workers cannot see it (they write the staged outputs)."""
    if is_remote(runner, beam_options) and is_local_uri(state_uri):
        raise ValueError(
            f"pipelines.state_uri {state_uri!r} is a local path, but the workers of {runner} run on other machines "
            "and stage their outputs there. Set pipelines.state_uri (or table.trajectories_uri, under which it "
            "defaults) to shared storage both the driver and the workers reach, e.g. s3://BUCKET/distill-state "
            "or gs://BUCKET/distill-state.")


def ship_client_files(client_kwargs: dict) -> dict:
    """The Kafka client arguments with every local file replaced by its content, read here on the driver."""
    shipped = dict(client_kwargs)
    for arg in CLIENT_FILE_ARGS:
        path = shipped.get(arg)
        if isinstance(path, str):
            try:
                shipped[arg] = ShippedFile(path, Path(path).read_bytes())
            except OSError as error:
                raise FileNotFoundError(f"kafka {arg} {path!r} cannot be read on the driver ({error}); the "
                                        "distiller ships it to the workers, so it must exist where "
                                        "`liverl distill` runs") from error
    return shipped


def unpack_client_files(client_kwargs: dict, folder: str | None = None) -> tuple[dict, list[str]]:
    """On a worker: write shipped files to private temporary files; returns (kwargs with paths, files to delete)."""
    unpacked, written = dict(client_kwargs), []
    for arg in CLIENT_FILE_ARGS:
        shipped = unpacked.get(arg)
        if isinstance(shipped, ShippedFile):
            handle, path = tempfile.mkstemp(prefix=f"liverl-{arg}-", suffix=Path(shipped.path).suffix, dir=folder)
            with os.fdopen(handle, "wb") as sink:  # mkstemp: readable by this user only (keys may be in it)
                sink.write(shipped.content)
            unpacked[arg] = path
            written.append(path)
    return unpacked, written
