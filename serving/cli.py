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
    else:
        await stopped
    say("serving stopping")
    await server.stop()
    say("serving stopped")
    return 0
