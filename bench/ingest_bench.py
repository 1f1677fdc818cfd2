"""Capture benchmark: events through the SDK and capture service vs a plain kafka-python producer.

Both run in one process run against the same embedded broker (tansu, memory storage, started here);
the capture service runs as its own process (`liverl capture`), as in production.

    .venv/bin/python bench/ingest_bench.py [--events 20000] [--rounds 3]

Prints, per round and as medians: events/s for each path, their ratio, and the p50/p99 time the SDK
adds to the caller's call (one recording call: build the event and queue it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# What the profiles showed (bench/README.md has the commands and the figures before and after).
NOTES = """notes   | the capture service is one GIL-bound process: its CPU per event (the `cpu` lines) bounds its rate,
        | and on shared cores the ratio follows the CPU ratio. With kafka-python in the service its producer
        | alone cost ~45 us per event (about the whole plain path); librdkafka (the service's
        | producer now) hands a record over in ~7-9 us, leaving redaction's prefilter (~19 us) and the checks and the
        | record (~18 us). Round 1 removed: ~12 RE2 scans per id string, murmur2 in pure Python per record, a
        | 2 ms linger. Round 2, from the SDK: uuid4 per id, a lock per sequence number, sizing every event twice,
        | framing each event in Python; from the service: a parse call per event. Round 3: the native producer.
        | bench/README.md has the profiles and figures."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000, help="events per path per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported (the machine is noisy)")
    parser.add_argument("--session-length", type=int, default=20, help="events per session")
    parser.add_argument("--batch-size", type=int, default=500, help="the SDK's batch_size: most events per request")
    parser.add_argument("--profile", type=Path, default=None,
                        help="folder: record py-spy profiles of the capture service and of this process (the SDK) "
                             "during each round's SDK run, and print their hottest frames (bench/README.md)")
    return parser.parse_args(argv)


def start_stack(folder: Path):
    from infra.embedded.broker import start_tansu
    from infra.embedded.topics import ensure_topics
    from liverl.config import load_config
    from liverl.io import processes

    port, grpc_port = processes.free_port(), processes.free_port()
    config = load_config(overrides=["--stack.data_dir", str(folder), "--stack.broker_port", str(port),
                                    "--ingest.grpc_port", str(grpc_port)], environ={})
    broker = start_tansu("127.0.0.1", port, folder, None)
    ensure_topics(config.kafka)
    log = folder / "capture.log"
    service = processes.start("capture", [sys.executable, "-m", "liverl.cli", "capture", "--log-level", "WARNING",
                                          "--stack.data_dir", str(folder), "--stack.broker_port", str(port),
                                          "--ingest.grpc_port", str(grpc_port), "--ingest.http_port", "0",
                                          "--ingest.metrics_port", "0",
                                          # the tenant rate limit (5000 events/s after a burst of 20000 by default)
                                          # is an admission policy, not overhead: off, or it is what gets measured
                                          "--ingest.rate_limit_events_per_s", "0"], log, cwd=REPO)
    processes.wait_until(lambda: "capture ready" in log.read_text(), 60, "liverl capture", service, log)
    return config, broker, service


def run_sdk(config, events: int, session_length: int, spool: Path, batch_size: int = 500) -> tuple[float, list[int]]:
    """events/s from the first recording call until the service acknowledged everything; per-call ns."""
    from ingest.sdk import CaptureClient  # imported by main() already: no import inside the measured run

    client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "demo-token", spool, max_queue_events=events + 10,
                           batch_size=batch_size)
    calls: list[int] = []
    clock = time.perf_counter_ns
    started = time.perf_counter()
    recorded = 0
    while recorded < events:
        t0 = clock()
        session = client.start_session(task_family="coding", task_id="bench", user_id="u1")
        calls.append(clock() - t0)
        recorded += 1
        for step in range(min(session_length, events - recorded) - 1):
            t0 = clock()
            if step % 2:
                session.tool_call("edit", '{"file": "a.py", "line": 42}', request_id="req-1")
            else:
                session.user_message("please fix the failing test in module a.py")
            calls.append(clock() - t0)
            recorded += 1
        if recorded < events:
            t0 = clock()
            session.end("completed")
            calls.append(clock() - t0)
            recorded += 1
    if not client.flush(timeout_s=300):
        raise RuntimeError(f"the SDK did not deliver in time: {client.stats()}")
    elapsed = time.perf_counter() - started
    stats = client.stats()
    client.close()
    if stats["sent"] != recorded or stats["dropped"] or stats["rejected"]:
        raise RuntimeError(f"not every event was accepted: {stats}")
    return recorded / elapsed, calls


def run_plain(config, events: int, session_length: int, cpu: "CpuMeter") -> float:
    """The same events, pre-built, through a plain idempotent kafka-python producer (acks=all)."""
    from kafka import KafkaProducer

    from liverl.v1 import session_event_pb2

    payloads = []
    for i in range(events):
        event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=f"s{i // session_length}",
                                               schema_version=1, event_time_ms=int(time.time() * 1000), sequence=i)
        event.user_message.text = "please fix the failing test in module a.py"
        payloads.append((event.session_id.encode(), event.SerializeToString()))
    producer = KafkaProducer(**config.kafka.client_kwargs(), enable_idempotence=True, acks="all", linger_ms=2)
    with cpu.measure("plain"):
        started = time.perf_counter()
        for key, value in payloads:
            producer.send("bench.plain", key=key, value=value)
        producer.flush()
        elapsed = time.perf_counter() - started
    producer.close()
    return events / elapsed


def main(argv=None) -> int:
    from bench.report import environment_line, record
    from liverl.io import processes

    args = parse_args(argv)
    import ingest.sdk  # noqa: F401 - the SDK's first import (grpc, protobuf) is no part of any round's CPU
    print(environment_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmp:
        folder = Path(tmp)
        config, broker, service = start_stack(folder)
        try:
            sdk_rates, plain_rates, all_calls = [], [], []
            cpu = CpuMeter({"bench": os.getpid(), "capture": service.pid, "broker": broker.pid})
            for round_index in range(args.rounds):
                plain = run_plain(config, args.events, args.session_length, cpu)
                with profiled(args.profile, round_index, {"capture": service.pid, "sdk": os.getpid()}), \
                        cpu.measure("sdk"):
                    sdk, calls = run_sdk(config, args.events, args.session_length, folder / f"sdk-spool-{round_index}",
                                         args.batch_size)
                sdk_rates.append(sdk)
                plain_rates.append(plain)
                all_calls.extend(calls)
                p50, p99 = percentile(calls, 50), percentile(calls, 99)
                print(f"round {round_index + 1} | sdk+capture {sdk:8.0f} ev/s | plain kafka-python {plain:8.0f} ev/s"
                      f" | ratio {sdk / plain:.2f} | caller p50 {p50 / 1000:.1f} us p99 {p99 / 1000:.1f} us"
                      f" | {os.getloadavg()[0]:.1f} load", flush=True)
        finally:
            processes.stop(service.pid)
            processes.stop(broker.pid)
    sdk_median, plain_median = statistics.median(sdk_rates), statistics.median(plain_rates)
    print(f"median  | sdk+capture {sdk_median:8.0f} ev/s | plain kafka-python {plain_median:8.0f} ev/s"
          f" | ratio {sdk_median / plain_median:.2f} | caller p50 {percentile(all_calls, 50) / 1000:.1f} us"
          f" p99 {percentile(all_calls, 99) / 1000:.1f} us ({len(all_calls)} calls)")
    per_event = cpu.per_event(args.events * args.rounds)
    for path, processes_us in per_event.items():
        spent = " + ".join(f"{name} {us:.0f}" for name, us in processes_us.items())
        print(f"cpu     | {path:4s} {sum(processes_us.values()):5.0f} us per event = {spent} (all threads, all rounds)")
    print(NOTES)
    print(environment_line())
    record("capture", {
        "sdk_events_per_s": sdk_median, "plain_events_per_s": plain_median, "ratio": sdk_median / plain_median,
        "ratios": [s / p for s, p in zip(sdk_rates, plain_rates)],
        "caller_p50_us": percentile(all_calls, 50) / 1000, "caller_p99_us": percentile(all_calls, 99) / 1000,
        "cpu_us_per_event": per_event,
    })
    return 0


class CpuMeter:
    """CPU seconds (user + system, every thread) each process spends inside `measure(path)` blocks: what an
    event costs the machine on each path, which bounds the ratio when the cores are shared (Linux /proc)."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.spent: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def measure(self, path: str):
        before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        try:
            yield
        finally:
            totals = self.spent.setdefault(path, {})
            for name, pid in self.pids.items():
                totals[name] = totals.get(name, 0.0) + cpu_seconds(pid) - before[name]

    def per_event(self, events: int) -> dict[str, dict[str, float]]:
        return {path: {name: 1e6 * seconds / events for name, seconds in totals.items() if seconds > 0}
                for path, totals in self.spent.items()}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@contextlib.contextmanager
def profiled(folder: Path | None, round_index: int, pids: dict[str, int]):
    """py-spy (on-CPU samples, raw collapsed stacks) attached to each pid while the block runs."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    recorders = {name: subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "200", "--gil", "--format", "raw",
                                         "--output", str(folder / f"{name}-round{round_index + 1}.txt")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name, pid in pids.items()}
    time.sleep(0.5)  # attached before the load starts
    try:
        yield
    finally:
        for name, recorder in recorders.items():
            recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            recorder.wait(timeout=60)
        for name in pids:
            print(hottest(folder / f"{name}-round{round_index + 1}.txt", name), flush=True)


def hottest(path: Path, name: str, top: int = 12) -> str:
    """The frames with the most on-CPU samples (self time) and their share, from a raw py-spy profile."""
    if not path.exists():
        return f"profile {name}: no samples written (is py-spy installed in the venv? see bench/README.md)"
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        frame = stack.rsplit(";", 1)[-1]
        own[frame] = own.get(frame, 0) + int(count)
    lines = [f"profile {name} ({total} samples, {path}): hottest frames by self time"]
    for frame, count in sorted(own.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"  {100 * count / max(total, 1):5.1f}%  {frame}")
    return "\n".join(lines)


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


if __name__ == "__main__":
    sys.exit(main())
