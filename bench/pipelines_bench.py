"""Distillation benchmark: the Beam distiller on three runners vs a plain kafka-python + pyarrow loop.

All paths read the same topic contents from an embedded broker (tansu, memory storage, started here) and
apply the same pure steps (parse, dedupe, readiness, token chains, liverl.rewards.label). The Beam paths are
the real `distill_once` (plan, Beam graph, staged Parquet, Delta commit with offsets) on

    direct     the in-process DirectRunner (the default of `liverl distill`)
    multi      the DirectRunner with --workers worker processes (--direct_running_mode=multi_processing)
    portable   PortableRunner -> Beam's local job service -> an external worker pool (the Fn API path of
               Flink, Spark and Dataflow; both services started here)

the plain path polls every partition in one consumer, groups in dicts and writes one Parquet file.

    .venv/bin/python bench/pipelines_bench.py [--sessions 1500] [--rounds 3] [--paths direct,multi,portable]

Prints the environment (cores, load average: the ratios mean little without it), each path's fixed cost (one
batch of 2 sessions), per round and as medians: sessions/s and events/s (Kafka records), and each Beam path's
ratio to the plain loop. The medians go to bench/report.py's JSON summary when LIVERL_BENCH_SUMMARY is set.
"""

from __future__ import annotations

import argparse
import contextlib
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
    parser.add_argument("--paths", default=",".join(PATHS), help=f"Beam paths to run, of {','.join(PATHS)}")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the multi path")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of each topic")
    return parser.parse_args(argv)


PATHS = ("direct", "multi", "portable")


def beam_settings(path: str, workers: int, portable_options: list[str]) -> tuple[str, list[str]]:
    """(pipelines.runner, pipelines.beam_options) of a Beam path."""
    quiet = ["--default_sdk_harness_log_level=WARNING"]  # workers in other processes log INFO otherwise
    if path == "multi":
        return "DirectRunner", [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing", *quiet]
    if path == "portable":
        return "PortableRunner", [*portable_options, *quiet]
    return "DirectRunner", []


def start_broker(folder: Path, partitions: int):
    from infra.embedded.broker import start_tansu
    from infra.embedded.topics import ensure_topics
    from liverl.config import load_config
    from liverl.io import processes

    port = processes.free_port()
    config = load_config(overrides=["--stack.data_dir", str(folder), "--stack.broker_port", str(port),
                                    "--pipelines.audit", "false", "--pipelines.reward_horizon_s", "0",
                                    "--kafka.partitions", str(partitions)], environ={})
    broker = start_tansu("127.0.0.1", port, folder, None)
    ensure_topics(config.kafka)
    return config, broker


def topics_named(config, prefix: str):
    """The config with topics of its own, created on the broker."""
    from infra.embedded.topics import ensure_topics

    config = config.model_copy(deep=True)
    config.kafka.session_events_topic = f"{prefix}.session-events"
    config.kafka.model_calls_topic = f"{prefix}.model-calls"
    ensure_topics(config.kafka)
    return config


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


def run_beam(config, folder: Path, runner: str, options: list[str]) -> tuple[float, int, int]:
    """(seconds, sessions, records) of one `distill_once` into a fresh table."""
    from pipelines.distill import distill_once

    config = config.model_copy(deep=True)
    config.pipelines.runner, config.pipelines.beam_options = runner, options
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


def crc_line() -> str:
    """kafka-python checks every record batch's CRC-32C: in C when the crc32c package is importable."""
    from kafka.record import util

    native = util._crc32c is not util.crc32c_py
    return f"kafka-python crc32c | {'native (crc32c package)' if native else 'pure Python: pip install crc32c'}"


def main(argv=None) -> int:
    args = parse_args(argv)
    paths = [path for path in args.paths.split(",") if path]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown --paths {sorted(unknown)}; choose from {','.join(PATHS)}")
    from bench.report import environment_line, record
    from liverl.io import processes
    from tests.pipelines.beam_services import portable_beam

    print(environment_line())
    print(crc_line())
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as services:
        folder = Path(tmp)
        config, broker = start_broker(folder, args.partitions)
        services.callback(processes.stop, broker.pid)
        portable_options = services.enter_context(portable_beam(folder / "beam"))[0] if "portable" in paths else []
        settings = {path: beam_settings(path, args.workers, portable_options) for path in paths}
        tiny = topics_named(config, "bench-tiny")
        produce_sessions(tiny, 2)
        fixed = {path: run_beam(tiny, folder / f"tiny-{path}", *settings[path])[0] for path in paths}
        print("fixed cost (a batch of 2 sessions) | " + " | ".join(f"{path} {fixed[path]:.1f}s" for path in paths))
        total = produce_sessions(config, args.sessions)
        print(f"topics hold {args.sessions} sessions, {total} records in {args.partitions} partitions per topic")
        rates: dict[str, list[tuple[float, float]]] = {path: [] for path in ["plain", *paths]}
        for round_no in range(args.rounds):
            p_s, p_sessions, p_records = run_plain(config, folder / f"plain-{round_no}")
            assert p_sessions == args.sessions, p_sessions
            rates["plain"].append((p_sessions / p_s, p_records / p_s))
            cells = [f"plain {p_sessions / p_s:7.1f} sessions/s ({p_s:.1f}s)"]
            for path in paths:
                b_s, b_sessions, b_records = run_beam(config, folder / f"{path}-{round_no}", *settings[path])
                assert b_sessions == args.sessions, (path, b_sessions)
                rates[path].append((b_sessions / b_s, b_records / b_s))
                cells.append(f"{path} {b_sessions / b_s:7.1f} sessions/s ({b_s:.1f}s)")
            print(f"round {round_no} | " + " | ".join(cells))
        medians = {path: {"sessions_per_s": round(statistics.median(r[0] for r in rows), 1),
                          "events_per_s": round(statistics.median(r[1] for r in rows), 1)}
                   for path, rows in rates.items()}
        plain = medians["plain"]["sessions_per_s"]
        for path in paths:
            medians[path]["ratio_to_plain"] = round(medians[path]["sessions_per_s"] / plain, 3)
            medians[path]["fixed_cost_s"] = round(fixed[path], 2)
        print("median | " + " | ".join(
            f"{path} {m['sessions_per_s']:.1f} sessions/s {m['events_per_s']:.0f} events/s"
            + (f" (x{m['ratio_to_plain']:.2f} plain)" if path != "plain" else "") for path, m in medians.items()))
        print(environment_line())
        record("pipelines", {"sessions": args.sessions, "rounds": args.rounds, "partitions": args.partitions,
                             "workers": args.workers, "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
