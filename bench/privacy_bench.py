"""Capture with per-subject payload encryption on vs off: the same SDK traffic, side by side in one run.

Two `liverl capture` processes on one embedded broker (tansu, memory storage, started here), identical but for
`privacy.encrypt_payloads`; each round sends the same events through the SDK to each (in alternating order, so
neither always runs on a warmer machine). Sessions carry a user id, so the sealed path also pseudonymises and
links users, as in production.

    .venv/bin/python bench/privacy_bench.py [--events 20000] [--rounds 5]

Prints per round and as medians: events/s of each, their ratio (goal >= 0.95), and the capture processes' CPU
per event (what bounds the rate on shared cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000, help="events per path per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported (the machine is noisy)")
    parser.add_argument("--session-length", type=int, default=20, help="events per session")
    return parser.parse_args(argv)


def start_capture(folder: Path, broker_port: int, sealed: bool):
    """A `liverl capture` process on the broker; returns (its config as the SDK sees it, the process)."""
    from liverl.config import load_config
    from liverl.io import processes

    grpc_port = processes.free_port()
    flags = ["--stack.data_dir", str(folder), "--stack.broker_port", str(broker_port),
             "--ingest.grpc_port", str(grpc_port), "--ingest.http_port", "0", "--ingest.metrics_port", "0",
             "--ingest.rate_limit_events_per_s", "0",  # an admission policy, not overhead (bench/ingest_bench.py)
             "--privacy.encrypt_payloads", "true" if sealed else "false"]
    config = load_config(overrides=flags, environ={})
    log = folder / "capture.log"
    service = processes.start("capture", [sys.executable, "-m", "liverl.cli", "capture", "--log-level", "WARNING",
                                          *flags], log, cwd=REPO)
    processes.wait_until(lambda: "capture ready" in log.read_text(), 60, "liverl capture", service, log)
    return config, service


def main(argv=None) -> int:
    from bench.ingest_bench import CpuMeter, run_sdk
    from bench.report import environment_line, record
    from infra.embedded.broker import start_tansu
    from infra.embedded.topics import ensure_topics
    from liverl.io import processes

    args = parse_args(argv)
    import ingest.sdk  # noqa: F401 - the SDK's first import is no part of any round
    print(environment_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="privacy-bench-") as tmp:
        folder = Path(tmp)
        port = processes.free_port()
        broker = start_tansu("127.0.0.1", port, folder, None)
        started = []
        try:
            paths = {}
            for name, sealed in (("sealed", True), ("plain", False)):
                (folder / name).mkdir()
                config, service = start_capture(folder / name, port, sealed)
                started.append(service)
                paths[name] = (config, service)
            ensure_topics(paths["plain"][0].kafka)
            cpu = CpuMeter({name: service.pid for name, (_, service) in paths.items()})
            rates: dict[str, list[float]] = {"sealed": [], "plain": []}
            for round_index in range(args.rounds):
                order = ("sealed", "plain") if round_index % 2 == 0 else ("plain", "sealed")
                for name in order:
                    with cpu.measure(name):
                        rate, _ = run_sdk(paths[name][0], args.events, args.session_length,
                                          folder / f"sdk-{name}-{round_index}")
                    rates[name].append(rate)
                print(f"round {round_index + 1} | sealed {rates['sealed'][-1]:8.0f} ev/s | plain "
                      f"{rates['plain'][-1]:8.0f} ev/s | ratio {rates['sealed'][-1] / rates['plain'][-1]:.3f} | "
                      f"{os.getloadavg()[0]:.1f} load", flush=True)
        finally:
            for service in started:
                processes.stop(service.pid)
            processes.stop(broker.pid)
    sealed, plain = statistics.median(rates["sealed"]), statistics.median(rates["plain"])
    per_event = cpu.per_event(args.events * args.rounds)
    sealed_us, plain_us = per_event["sealed"]["sealed"], per_event["plain"]["plain"]
    print(f"median  | sealed {sealed:8.0f} ev/s | plain {plain:8.0f} ev/s | ratio {sealed / plain:.3f} (goal >= 0.95)")
    print(f"cpu     | capture sealed {sealed_us:.1f} us per event | plain {plain_us:.1f} us per event | "
          f"ratio {plain_us / sealed_us:.3f}")
    print(environment_line())
    record("privacy", {"sealed_events_per_s": sealed, "plain_events_per_s": plain, "ratio": sealed / plain,
                       "ratios": [s / p for s, p in zip(rates["sealed"], rates["plain"])],
                       "capture_cpu_us_per_event": {"sealed": sealed_us, "plain": plain_us}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
