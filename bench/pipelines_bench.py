"""Distillation benchmark: the Beam distiller vs a plain kafka-python + pyarrow loop, on the same topics.

Both read the same topic contents from an embedded broker (tansu, memory storage, started here) and
apply the same pure steps (parse, dedupe, readiness, token chains, liverl.rewards.label). The Beam path
is the real `distill_once` (plan, Beam DirectRunner, staged Parquet, Delta commit with offsets); the
plain path polls every partition in one consumer, groups in dicts and writes one Parquet file.

    .venv/bin/python bench/pipelines_bench.py [--sessions 1500] [--rounds 3] [--runner FnApiRunner]

Prints, per round and as medians: sessions/s and events/s (Kafka records) of each path and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

T0 = 1_790_000_000_000


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1500, help="sessions on the topics (about 10 records each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runner", default="DirectRunner", help="Beam runner of the distiller")
    return parser.parse_args(argv)


def start_broker(folder: Path):
    from liverl.io import processes
    from infra.embedded.broker import start_tansu
    from infra.embedded.topics import ensure_topics
    from liverl.config import load_config

    port = processes.free_port()
    config = load_config(overrides=["--stack.data_dir", str(folder), "--stack.broker_port", str(port),
                                    "--pipelines.audit", "false", "--pipelines.reward_horizon_s", "0"], environ={})
    broker = start_tansu("127.0.0.1", port, folder, None)
    ensure_topics(config.kafka)
    return config, broker


def produce_sessions(config, count: int) -> int:
    """Sessions of the pipelines tests (single agent with a self-summary; orchestrator with a sub-agent)."""
    from tests.pipelines.producing import coding_session, orchestrator_session, produce

    events, calls = [], []
    for i in range(count):
        e, c = (coding_session if i % 2 else orchestrator_session)(f"bench-{i}", t=i)
        events += e
        calls += c
    produce(config, events, calls)
    return len(events) + len(calls)


def run_beam(config, folder: Path) -> tuple[float, int, int]:
    """(seconds, sessions, records) of one `distill_once` into a fresh table."""
    from pipelines.distill import distill_once

    config = config.model_copy(deep=True)
    config.table.trajectories_uri = str(folder / "trajectories")
    config.table.dead_letters_uri = str(folder / "dead_letters")
    began = time.perf_counter()
    report = distill_once(config, now_ms=T0 + 10 * 24 * 3600_000)
    seconds = time.perf_counter() - began
    return seconds, report.sessions, sum(b - a for parts in report.offsets.values() for a, b in parts.values())


def run_plain(config, folder: Path) -> tuple[float, int, int]:
    """The same work without Beam: one consumer, dicts, one Parquet file."""
    import pyarrow.parquet as pq
    from kafka import KafkaConsumer, TopicPartition

    from liverl.contracts.trajectory_row import rows_to_table
    from pipelines.kafka_source import high_water_marks
    from pipelines.parse import Parsed, parse_record
    from pipelines.records import RawRecord
    from pipelines.sessionize import READY, Timing, decide
    from pipelines.trajectories import build_rows

    kafka = config.kafka
    topics = [kafka.session_events_topic, kafka.model_calls_topic]
    began = time.perf_counter()
    marks = high_water_marks(kafka.client_kwargs(), topics, {})
    consumer = KafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    partitions = [TopicPartition(topic, p) for (topic, p) in marks]
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, 0)
    groups: dict[tuple[str, str], list[Parsed]] = {}
    records = 0
    while any(consumer.position(tp) < marks[(tp.topic, tp.partition)] for tp in partitions):
        for tp, batch in consumer.poll(timeout_ms=500).items():
            for m in batch:
                if m.offset >= marks[(tp.topic, tp.partition)]:
                    continue
                records += 1
                raw = RawRecord(m.topic, m.partition, m.offset, m.timestamp, m.key, m.value, tuple(m.headers or ()))
                parsed = parse_record(raw, *topics)
                if isinstance(parsed, Parsed):
                    groups.setdefault(parsed.session_key, []).append(parsed)
    consumer.close()
    timing = Timing(T0 + 10 * 24 * 3600_000, 0, 10**12, 10**12)
    rows = []
    sessions = 0
    for key, items in groups.items():
        decision = decide(key, items, [], timing)
        if decision.status == READY:
            built, _ = build_rows(decision.session, config.rewards, "plain", timing.as_of_ms)
            rows += built
            sessions += bool(built)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows_to_table(rows), folder / "plain.parquet")
    return time.perf_counter() - began, sessions, records


def main(argv=None) -> int:
    args = parse_args(argv)
    from liverl.io import processes

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config, broker = start_broker(folder)
        config.pipelines.runner = args.runner
        try:
            total = produce_sessions(config, args.sessions)
            print(f"topics hold {args.sessions} sessions, {total} records; runner {args.runner}")
            beam_rates, plain_rates = [], []
            for round_no in range(args.rounds):
                b_s, b_sessions, b_records = run_beam(config, folder / f"beam-{round_no}")
                p_s, p_sessions, p_records = run_plain(config, folder / f"plain-{round_no}")
                assert b_sessions == p_sessions == args.sessions, (b_sessions, p_sessions)
                beam_rates.append((b_sessions / b_s, b_records / b_s))
                plain_rates.append((p_sessions / p_s, p_records / p_s))
                print(f"round {round_no} | beam {b_sessions / b_s:8.1f} sessions/s {b_records / b_s:9.1f} events/s"
                      f" ({b_s:.2f}s) | plain {p_sessions / p_s:8.1f} sessions/s {p_records / p_s:9.1f} events/s"
                      f" ({p_s:.2f}s)")
            beam_sessions = statistics.median(r[0] for r in beam_rates)
            beam_events = statistics.median(r[1] for r in beam_rates)
            plain_sessions = statistics.median(r[0] for r in plain_rates)
            plain_events = statistics.median(r[1] for r in plain_rates)
            print(f"median | beam {beam_sessions:.1f} sessions/s {beam_events:.1f} events/s | plain "
                  f"{plain_sessions:.1f} sessions/s {plain_events:.1f} events/s | beam/plain sessions/s "
                  f"{beam_sessions / plain_sessions:.2f} events/s {beam_events / plain_events:.2f}")
        finally:
            processes.stop(broker.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
