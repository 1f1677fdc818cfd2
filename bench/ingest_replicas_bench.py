"""Capture scale-out benchmark: events/s through two capture replicas vs one, behind a round-robin client.

Each replica is its own `liverl capture` process (as in production) on one embedded broker (tansu, memory
storage, started here). With two, every request goes to the replicas in turn, so about half of each
request's events belong to sessions the other replica owns and take one more hop (ingest/routing.py).

    .venv/bin/python bench/ingest_replicas_bench.py [--events 20000] [--rounds 3] [--clients 4]

Prints, per round and as medians: events/s with one replica and with two, their ratio, and the share
of events forwarded. On a machine with fewer free cores than replicas + broker + client, the ratio says
what the extra hop costs rather than what a second machine adds; the environment line says which.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000, help="events per configuration per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads (each its own sessions)")
    parser.add_argument("--batch", type=int, default=200, help="events per request")
    parser.add_argument("--session-length", type=int, default=20, help="events per session")
    return parser.parse_args(argv)


def start_broker(folder: Path):
    from infra.embedded.broker import start_tansu
    from infra.embedded.topics import ensure_topics
    from liverl.config import load_config
    from liverl.io import processes

    port = processes.free_port()
    config = load_config(overrides=["--stack.data_dir", str(folder), "--stack.broker_port", str(port)], environ={})
    broker = start_tansu("127.0.0.1", port, folder, None)
    ensure_topics(config.kafka)
    return config, broker


def start_replicas(config, folder: Path, count: int) -> tuple[list, list[str]]:
    """`count` capture processes sharing sessions (ingest.replicas); their gRPC addresses."""
    from liverl.io import processes

    ports = [processes.free_port() for _ in range(count)]
    addresses = [f"127.0.0.1:{port}" for port in ports]
    services = []
    for index, port in enumerate(ports):
        log = folder / f"capture-{count}-{index}.log"
        ring = ["--ingest.replicas", json.dumps(addresses if count > 1 else []), "--ingest.replica_token", "bench"]
        services.append(processes.start(
            f"capture-{index}", [sys.executable, "-m", "liverl.cli", "capture", "--log-level", "WARNING",
                                 "--stack.data_dir", str(folder / f"replica-{count}-{index}"),
                                 "--stack.broker_port", str(config.stack.broker_port),
                                 "--ingest.grpc_port", str(port), "--ingest.http_port", "0",
                                 "--ingest.metrics_port", "0", "--ingest.rate_limit_events_per_s", "0", *ring],
            log, cwd=REPO))
        processes.wait_until(lambda log=log: "capture ready" in log.read_text(), 60, "liverl capture",
                             services[-1], log)
    return services, addresses


def build_requests(events: int, clients: int, batch: int, session_length: int) -> list[list[bytes]]:
    """Per client, its requests (serialized CaptureRequests), each session's events in recording order."""
    from liverl.v1 import capture_pb2, session_event_pb2

    per_client = []
    now_ms = int(time.time() * 1000)
    for _ in range(clients):
        client_events = []
        while len(client_events) < events // clients:
            session_id = uuid.uuid4().hex
            for sequence in range(session_length):
                event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=session_id,
                                                       schema_version=1, event_time_ms=now_ms, sequence=sequence,
                                                       user_id="u1")
                if sequence == 0:
                    event.session_start.task_family = "coding"
                elif sequence == session_length - 1:
                    event.session_end.reason = "completed"
                else:
                    event.user_message.text = "please fix the failing test in module a.py"
                client_events.append(event)
        per_client.append([capture_pb2.CaptureRequest(events=client_events[i:i + batch]).SerializeToString()
                           for i in range(0, len(client_events), batch)])
    return per_client


def run_round(addresses: list[str], requests: list[list[bytes]]) -> float:
    """events/s: every client sends its requests one after another, to the replicas in turn."""
    import grpc

    from liverl.v1 import capture_pb2

    calls = [grpc.insecure_channel(a).unary_unary("/liverl.v1.CaptureService/Capture", request_serializer=None,
                                                  response_deserializer=capture_pb2.CaptureResponse.FromString)
             for a in addresses]
    accepted = [0] * len(requests)
    problems: list[str] = []

    def client(index: int) -> None:
        for turn, request in enumerate(requests[index]):
            answer = calls[(turn + index) % len(calls)](request, metadata=(("authorization", "Bearer demo-token"),),
                                                        timeout=60)
            accepted[index] += answer.accepted
            if answer.rejected:
                problems.append(f"{len(answer.rejected)} rejected, first: {answer.rejected[0].reason}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if problems:
        raise RuntimeError(f"the replicas refused events: {problems[:3]}")
    return sum(accepted) / elapsed


def measure(config, folder: Path, count: int, args) -> list[float]:
    from liverl.io import processes

    services, addresses = start_replicas(config, folder, count)
    try:
        run_round(addresses, build_requests(args.batch * 4, 1, args.batch, args.session_length))  # warm-up
        rates = []
        for round_index in range(args.rounds):
            rate = run_round(addresses, build_requests(args.events, args.clients, args.batch, args.session_length))
            print(f"round {round_index + 1} | {count} replica{'s' if count > 1 else ''} {rate:8.0f} ev/s", flush=True)
            rates.append(rate)
        return rates
    finally:
        for service in services:
            processes.stop(service.pid)


def main(argv=None) -> int:
    from bench.report import environment_line, record
    from liverl.io import processes

    args = parse_args(argv)
    print(environment_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="ingest-replicas-bench-") as tmp:
        folder = Path(tmp)
        config, broker = start_broker(folder)
        try:
            one = measure(config, folder, 1, args)
            two = measure(config, folder, 2, args)
        finally:
            processes.stop(broker.pid)
    one_median, two_median = statistics.median(one), statistics.median(two)
    print(f"median  | 1 replica {one_median:8.0f} ev/s | 2 replicas {two_median:8.0f} ev/s"
          f" | ratio {two_median / one_median:.2f} | ~50% of events forwarded with 2")
    print(environment_line())
    record("ingest_replicas", {
        "one_replica_events_per_s": one_median, "two_replicas_events_per_s": two_median,
        "ratio": two_median / one_median, "one_replica_rounds": one, "two_replicas_rounds": two,
        "clients": args.clients, "batch_events": args.batch, "events_per_round": args.events,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
