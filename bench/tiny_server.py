"""What the layer benchmarks share: liverl's real PolicyServer on a tiny policy (the light "hf" engine, recording
off, one API key without a rate limit), running on a uvloop loop of its own thread, as `liverl serve` runs it."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


@dataclass
class TinyServer:
    server: object  # serving.server.PolicyServer, started
    on_loop: Callable  # on_loop(coroutine, timeout_s=600): run a coroutine on the server's loop, return its result


@contextlib.contextmanager
def tiny_server(key: str, prefix: str) -> Iterator[TinyServer]:
    """A started PolicyServer that takes `key`; stopped, its loop ended and its folder removed on exit."""
    import uvloop

    from demo.policy.tiny_policy import build_policy
    from liverl.config import load_config
    from serving.server import PolicyServer

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        policy = build_policy(Path(tmp) / "policy", WORDS, seed=0)
        config = load_config(overrides=[
            "--stack.data_dir", str(Path(tmp) / "stack"), "--serving.engine", "hf", "--serving.record", "false",
            "--serving.policy_dir", str(policy), "--serving.grpc_port", "0", "--serving.http_port", "0",
            "--serving.metrics_port", "0", "--mlflow.registered_model", "bench-policy"], environ={})
        c = config.serving
        c.api_keys, c.rate_limit_per_s, c.rate_limit_burst = {key: {"tenant": "bench"}}, 1e9, 10**9
        loop = uvloop.new_event_loop()  # the loop `liverl serve` runs the server on (serving.cli)
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def on_loop(coroutine, timeout_s=600):
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout_s)

        server = PolicyServer(config, say=lambda *_: None)
        try:
            on_loop(server.start())
            try:
                yield TinyServer(server, on_loop)
            finally:
                on_loop(server.stop(grace_s=5))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
