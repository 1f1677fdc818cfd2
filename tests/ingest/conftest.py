"""Ingest fixtures: a capture service on the shared broker with its own topics, and Kafka readers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liverl.config import LiverlConfig
from tests.conftest import opened


def capture_config(base: LiverlConfig, spool_dir: Path, **ingest) -> LiverlConfig:
    """base with the capture service on free ports, its spool under spool_dir, and `ingest` overrides."""
    from liverl.io.processes import free_port

    config = base.model_copy(deep=True)
    config.ingest.grpc_port = free_port()
    config.ingest.http_port = free_port()
    config.ingest.metrics_port = 0
    config.ingest.spool_dir = spool_dir
    config.ingest.kafka_ack_timeout_s = 2.0
    config.ingest.tenant_tokens = {"acme": "acme-token", "globex": "globex-token"}
    for key, value in ingest.items():
        setattr(config.ingest, key, value)
    return config


@pytest.fixture
def capture(fresh_topics: LiverlConfig, tmp_path: Path) -> Iterator:
    """A running CaptureServer (tenants acme and globex) on the test's own topics."""
    from ingest.service import CaptureServer

    server = CaptureServer(capture_config(fresh_topics, tmp_path / "service-spool")).start()
    try:
        yield server
    finally:
        server.stop()


def read_topic(config: LiverlConfig, topic: str, want: int, timeout_s: float = 30.0) -> list:
    """Every record of topic from the beginning, once at least `want` arrived (or time ran out)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        records: list = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
            if len(records) >= want:
                # one more empty poll so duplicates behind the last one are seen too
                for batch in consumer.poll(timeout_ms=300).values():
                    records.extend(batch)
                break
        return opened(config, records)
    finally:
        consumer.close()


def events_of(records) -> list:
    from liverl.v1 import session_event_pb2

    return [session_event_pb2.SessionEvent.FromString(r.value) for r in records]


def assert_sessions_complete(events, counts: dict[str, int]) -> None:
    """Per session, the first copy of each event (dedupe on event_id) came in recording order, none missing:
    the SDK numbers a session's events 0, 1, 2, ... in the order they were recorded."""
    seen: set[str] = set()
    order: dict[str, list[int]] = {}
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            order.setdefault(event.session_id, []).append(event.sequence)
    for session_id, count in counts.items():
        got = order.get(session_id, [])
        assert sorted(got) == list(range(count)), f"session {session_id}: {count - len(set(got))} events lost"
        assert got == list(range(count)), f"session {session_id}: order not kept: {got}"
