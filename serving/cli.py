"""`liverl serve`: run the policy server until SIGINT or SIGTERM, following the registry alias.

    liverl serve --serving.engine hf --serving.grpc_port 0 --serving.http_port 0 --serving.watch_interval_s 2

Prints one structured line when ready (`serving ready grpc=HOST:PORT http=HOST:PORT version=N ...`)
and one per swap, rollback or canary change.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from liverl.config import LiverlConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy-dir", metavar="DIR",
                        help="serve this policy folder instead of the registry alias (no hot-swap)")


def run(config: LiverlConfig, args: argparse.Namespace) -> int:
    import asyncio

    import uvloop

    if getattr(args, "policy_dir", None):
        config.serving.policy_dir = args.policy_dir
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # libuv: cheaper per request than asyncio's
        return runner.run(_serve(config))


async def _serve(config: LiverlConfig) -> int:
    import asyncio
    import logging
    import signal

    from serving.server import PolicyServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("kafka", "vllm", "httpx", "mlflow", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def say(line: str) -> None:
        print(line, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = PolicyServer(config, say=say)
    start = asyncio.create_task(server.start())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if start.done() and start.exception() is not None:
        await server.stop()
        raise start.exception()
    if not start.done():  # a signal while still loading the first version
        start.cancel()
        failure = None
    else:
        failure = await _until_stopped_or_failed(stopped, server, config.serving.watch_interval_s)
    if failure:  # exit non-zero so that a supervisor starts a fresh server; records in flight are flushed first
        say(f"serving engine-dead reason={failure!r}")
        await server.mark_not_serving()
    say("serving stopping")
    await server.stop()
    say("serving stopped")
    return 1 if failure else 0


async def _until_stopped_or_failed(stopped, server, interval_s: float) -> str | None:
    """Wait for the stop signal; return early, with the reason, once the engine can no longer serve."""
    import asyncio

    while not stopped.done():
        failure = server.engine_failure()
        if failure:
            stopped.cancel()
            return failure
        await asyncio.wait({stopped}, timeout=max(interval_s, 0.5))
    return None
