"""`liverl capture`: run the capture service (gRPC + HTTP JSON) until SIGINT or SIGTERM.

Prints one ready line, `capture ready grpc=HOST:PORT http=HOST:PORT`, once both listeners accept.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--log-level", default="INFO", help="logging level of the service's structured lines")


def run(config, args) -> int:
    import logging
    import signal
    import threading

    from ingest.service import CaptureServer

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # kafka-python logs every failed reconnect; the service logs the state changes that matter.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = CaptureServer(config).start()
    http = server.http_address if server.http_port else "off"
    print(f"capture ready grpc={server.grpc_address} http={http}", flush=True)
    try:
        stop.wait()
    finally:
        server.stop()
    return 0
