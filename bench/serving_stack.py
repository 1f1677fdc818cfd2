"""The embedded stack a benchmark runs against: a config on free ports under a temporary folder (serving on free
ports too, no automatic swaps: the benchmark moves the alias itself), the stack up for the benchmark's length,
stopped also when the benchmark is stopped (SIGTERM, Ctrl-C), versions registered as the trainer would, and a
policy server on a thread of its own for the serving benchmarks."""

from __future__ import annotations

import contextlib
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from liverl.config import LiverlConfig
    from serving.server import PolicyServer


@contextlib.contextmanager
def embedded_stack(prefix: str, registered_model: str, *overrides: str) -> Iterator[tuple[LiverlConfig, Path]]:
    """(the config, a temporary folder) with the embedded stack (broker + MLflow) running; overrides are more
    `--section.field value` pairs."""
    from infra.embedded.broker import GRPC_OFFSET, S3_SIDE_PORTS
    from infra.embedded.stack import down, up
    from liverl.config import load_config
    from liverl.io.processes import free_port, free_port_block

    signal.signal(signal.SIGTERM, _interrupt)  # so a stopped bench still stops the stack it started
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        tmp = Path(tmp)
        config = load_config(overrides=[
            "--stack.data_dir", str(tmp / "stack"), "--stack.broker_storage", "memory",
            "--stack.broker_port", str(free_port()),
            # the S3 port and the side ports the broker derives from it must all be free (and below the bound)
            "--stack.s3_port", str(free_port_block(len(S3_SIDE_PORTS) + 1, spread=GRPC_OFFSET)),
            "--stack.mlflow_port", str(free_port()),
            "--mlflow.registered_model", registered_model, *overrides], environ={})
        print(f"starting the embedded stack in {tmp} ...", flush=True)
        up(config, say=lambda *_: None)
        try:
            yield config, tmp
        finally:
            down(config, say=lambda *_: None)


@contextlib.contextmanager
def serving_stack(prefix: str, engine: str, registered_model: str, *overrides: str
                  ) -> Iterator[tuple[LiverlConfig, Path]]:
    """embedded_stack with serving's ports free and its automatic swaps off; overrides come last (the probation
    window, LoRA, ...)."""
    with embedded_stack(prefix, registered_model,
                        "--serving.engine", engine, "--serving.grpc_port", "0", "--serving.http_port", "0",
                        "--serving.metrics_port", "0", "--serving.min_swap_interval_s", "1e9", *overrides) as running:
        yield running


@contextlib.contextmanager
def running_server(config: LiverlConfig, say: Callable[[str], None]) -> Iterator[PolicyServer]:
    """A started PolicyServer on an event loop of its own thread, so the benchmark's loop is its client; stopped
    on the way out."""
    import asyncio
    import threading

    import uvloop

    from serving.server import PolicyServer

    loop = uvloop.new_event_loop()  # the loop `liverl serve` runs the server on (serving.cli)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = PolicyServer(config, say=say)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(1800)  # vLLM's start: minutes on a busy machine
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(grace_s=5), loop).result(300)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def register(config: LiverlConfig, folder: Path, tags: dict[str, str] | None = None, alias: str | None = None) -> str:
    """Register a policy folder as a new version, signed as the trainer's gate signs what it passes (serving refuses
    unsigned versions), and point alias at it."""
    from liverl.io.registry import ModelRegistry
    from liverl.io.signing import folder_digest
    from trainer.io.signing import sign_pass

    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    version = registry.register_folder(folder, tags or {}, f"bench-{time.time_ns()}", "bench")
    sign_pass(registry, version, folder_digest(folder), config.trainer.signing_key_file)
    if alias:
        registry.set_alias(alias, version)
    return version


def _interrupt(*_):
    raise KeyboardInterrupt
