"""Beam's own portability services, started locally: a job service and an external SDK worker pool.

PortableRunner -> local job service -> workers from the pool is the Fn API path Flink, Spark and Dataflow
use; tests and bench/pipelines_bench.py run the distiller through it. Both listen on 127.0.0.1 ports picked
here and stop by PID (the pool's workers are in its process group).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from liverl.io import processes


@contextmanager
def portable_beam(folder: Path, timeout_s: float = 60.0) -> Iterator[tuple[list[str], set[int]]]:
    """Yields (the beam_options that send a job there, the services' PIDs); logs under folder."""
    job_port, pool_port = processes.free_port(), processes.free_port()
    # The pool starts each SDK worker as `python -c ...` found on PATH: this interpreter's folder leads PATH.
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    loopback = str(Path(__file__).with_name("loopback_beam.py"))  # Beam binds "[::]" otherwise
    job = processes.start("beam-job-service", [
        sys.executable, loopback, "apache_beam.runners.portability.local_job_service_main",
        f"--port={job_port}", f"--staging_dir={folder / 'artifacts'}"], folder / "job-service.log")
    pool = processes.start("beam-worker-pool", [
        sys.executable, loopback, "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}"],
        folder / "worker-pool.log", env=path)
    try:
        for process, port, log in ((job, job_port, folder / "job-service.log"),
                                   (pool, pool_port, folder / "worker-pool.log")):
            processes.wait_until(lambda: processes.port_open("127.0.0.1", port), timeout_s, log.stem, process, log)
        yield [f"--job_endpoint=127.0.0.1:{job_port}", "--environment_type=EXTERNAL",
               f"--environment_config=127.0.0.1:{pool_port}"], {job.pid, pool.pid}
    finally:
        processes.stop(pool.pid)
        processes.stop(job.pid)
