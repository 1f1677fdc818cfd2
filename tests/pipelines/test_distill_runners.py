"""The distill graph off the driver: Beam's portability path and several worker processes commit the same table.

One batch of 24 sessions on topics of 16 partitions is distilled three times from the same log: on the
in-process DirectRunner (the reference), on the DirectRunner with two worker processes, and through
PortableRunner -> Beam's local job service -> workers started by an external worker pool (the Fn API path
Flink, Spark and Dataflow use). Every run must commit the same trajectory and dead-letter rows.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.distill import BatchReport, distill_once
from tests.conftest import with_topics
from tests.pipelines.beam_services import portable_beam
from tests.pipelines.conftest import distiller_on
from tests.pipelines.producing import T0, coding_session, orchestrator_session, produce

pytestmark = pytest.mark.slow
AS_OF = T0 + 3600_000
SESSIONS = 24
PARTITIONS = 16


class Batch:
    """The topics, and the reference run's report and tables."""

    def __init__(self, config, report: BatchReport):
        self.config, self.report = config, report
        self.trajectories, self.dead_letters = committed(config)


@pytest.fixture(scope="module")
def batch(stack, tmp_path_factory) -> Batch:
    topics = with_topics(stack, f"runners-{os.getpid()}", partitions=PARTITIONS)
    events, calls = [], []
    for i in range(SESSIONS):
        e, c = (coding_session if i % 2 else orchestrator_session)(f"wide-{i}", t=i)
        events += e
        calls += c
    calls[3].completion_logprobs.append(-1.0)  # wide-1 (coding) dead-lettered: the dead letters are compared too
    produce(topics, events, calls, raw=[(topics.kafka.session_events_topic, b"bad", b"\xff\x00garbage", ())])
    config = distiller_on(topics, tmp_path_factory.mktemp("direct"), "runners")
    return Batch(config, distill_once(config, now_ms=AS_OF))


def committed(config) -> tuple[pa.Table, pa.Table]:
    """Both tables, rows in a fixed order (Parquet files and rows within them come in runner order), token ids
    opened: each run seals them under a fresh nonce, so only the opened ids can be compared."""
    from liverl.privacy import row_opener_for

    stored = DeltaTable(config.table.trajectories_uri).to_pyarrow_table().sort_by("trajectory_id")
    assert all(stored.column("sealed_token_ids").to_pylist()), "every committed row's token ids are sealed"
    opener = row_opener_for(config)
    trajectories = pa.Table.from_pylist([opener.open_row(row) for row in stored.to_pylist()], schema=stored.schema)
    dead = DeltaTable(config.table.dead_letters_uri).to_pyarrow_table().sort_by("dead_letter_id")
    return trajectories.drop_columns(["sealed_token_ids"]), dead


def run_on(batch: Batch, folder: Path, runner: str, options: list[str]) -> BatchReport:
    config = distiller_on(batch.config, folder, "runners")
    config.pipelines.runner, config.pipelines.beam_options = runner, options
    return distill_once(config, now_ms=AS_OF)


def assert_same_commit(batch: Batch, report: BatchReport, folder: Path) -> None:
    """Same rows, ids, rewards and offsets; batch id and clock agree too, since both ran plan 1 at AS_OF."""
    trajectories, dead = committed(distiller_on(batch.config, folder, "runners"))
    assert trajectories.num_rows == batch.trajectories.num_rows == 3 * SESSIONS // 2 - 1
    assert trajectories.equals(batch.trajectories.select(trajectories.column_names))
    assert dead.equals(batch.dead_letters.select(dead.column_names))
    assert (report.offsets, report.sessions, report.dead_letters) == (
        batch.report.offsets, batch.report.sessions, batch.report.dead_letters)
    assert report.counters["records_read"] == batch.report.counters["records_read"]


def test_sessions_spread_over_partitions_and_keep_their_order(batch):
    """Every session's records sit in one partition in the order produced, and its chain is rebuilt intact."""
    from kafka import KafkaConsumer, TopicPartition

    from liverl.v1.model_call_pb2 import ModelCall
    from liverl.v1.session_event_pb2 import SessionEvent

    kafka = batch.config.kafka
    for topic, parts in batch.report.offsets.items():
        assert len(parts) == PARTITIONS
        assert sum(1 for first, end in parts.values() if end > first) >= PARTITIONS // 2, (topic, parts)
    consumer = KafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    where, order = defaultdict(set), defaultdict(list)
    for topic, parts in batch.report.offsets.items():
        for partition, (first, end) in parts.items():
            tp = TopicPartition(topic, int(partition))
            consumer.assign([tp])
            consumer.seek(tp, first)
            while consumer.position(tp) < end:
                for message in consumer.poll(timeout_ms=500).get(tp, []):
                    if message.key == b"bad":
                        continue
                    where[message.key].add((topic, tp.partition))
                    if topic == kafka.session_events_topic:
                        order[(topic, message.key)].append(SessionEvent.FromString(message.value).sequence)
                    else:
                        order[(topic, message.key)].append(ModelCall.FromString(message.value).request_time_ms)
    consumer.close()
    assert len(where) == SESSIONS and all(len(places) == 2 for places in where.values())  # one per topic
    assert all(times == sorted(times) for times in order.values())
    rows = batch.trajectories.to_pylist()
    coding = [r for r in rows if r["agent_role"] == "single"]
    assert len(coding) == SESSIONS // 2 - 1  # one of them is the token-mismatch dead letter
    assert all(r["num_model_calls"] == 3 and r["segment_starts"] == [0, 8] for r in coding)
    assert len(batch.report.workers) == 1  # in process: the driver itself read everything
    assert batch.report.workers == {f"{socket.gethostname()}:{os.getpid()}": batch.report.counters["records_read"]}


def test_two_worker_processes_commit_the_same_table(batch, tmp_path):
    report = run_on(batch, tmp_path, "DirectRunner", ["--direct_num_workers=2",
                                                        "--direct_running_mode=multi_processing"])
    assert_same_commit(batch, report, tmp_path)
    assert len(report.workers) == 2 and all(records > 0 for records in report.workers.values()), report.workers
    assert sum(report.workers.values()) == report.counters["records_read"]
    assert not any(name.endswith(f":{os.getpid()}") for name in report.workers)


@pytest.fixture
def portable_services(tmp_path):
    with portable_beam(tmp_path) as services:
        yield services


def test_the_portable_runner_with_an_external_worker_pool_commits_the_same_table(batch, tmp_path, portable_services):
    options, service_pids = portable_services
    report = run_on(batch, tmp_path / "portable", "PortableRunner", options)
    assert_same_commit(batch, report, tmp_path / "portable")
    pids = {int(name.rsplit(":", 1)[1]) for name in report.workers}
    assert pids and not pids & (service_pids | {os.getpid()}), (pids, service_pids)  # read in the pool's workers
    assert sum(report.workers.values()) == report.counters["records_read"]
