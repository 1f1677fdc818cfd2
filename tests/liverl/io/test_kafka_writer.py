"""The Kafka writer against the real embedded broker: broker down -> spooled -> broker up -> replayed, none lost."""

from __future__ import annotations

import time

import pytest

from infra.embedded.broker import start_tansu
from infra.embedded.topics import ensure_topics
from liverl.config import LiverlConfig
from liverl.config.kafka import KafkaConfig
from liverl.io import processes
from liverl.io.kafka_writer import KafkaSettingsRefused, KafkaWriter, Record, WriterListener
from liverl.io.spool import Spool
from tests.conftest import stack_config


class Tally(WriterListener):
    def __init__(self) -> None:
        self.sent = self.replayed = self.parked = 0

    def acknowledged(self, records: list[Record], replayed: bool) -> None:
        if replayed:
            self.replayed += len(records)
        else:
            self.sent += len(records)

    def spooled(self, records: list[Record]) -> None:
        self.parked += len(records)


def make_records(topic: str, start: int, count: int, sessions: int = 3) -> list[Record]:
    return [Record(topic, f"session-{i % sessions}".encode(), f"event-{i:03d}".encode(),
                   (("liverl-kind", b"test"), ("raw", bytes([i % 256, 0, 255]))), 1_700_000_000_000 + i)
            for i in range(start, start + count)]


def read_all(config: LiverlConfig, topic: str, want: int, timeout_s: float = 30.0) -> list:
    """Every record of topic (all partitions) from the start, once want arrived or timeout_s passed."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config.kafka.client_kwargs(), enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        out: list = []
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                out += batch
        return out
    finally:
        consumer.close()


def assert_exactly(received: list, sent: list[Record]) -> None:
    """The same records, each once, and in write order within each key."""
    got = [(r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers)) for r in received]
    assert sorted(got) == sorted((r.key, r.value, r.headers) for r in sent)
    for key in {r.key for r in sent}:
        assert [v for k, v, _ in got if k == key] == [r.value for r in sent if r.key == key]


def test_a_record_round_trips_through_its_spool_encoding():
    record = Record("topic", "sessión".encode(), b"\x00\xffvalue", (("liverl-tenant", b"\xff\x00acme"),), 1234)
    assert Record.decode(record.encode()) == record
    empty_key = Record("dead", b"", b"{}")
    assert Record.decode(empty_key.encode()) == empty_key


@pytest.fixture
def absent_broker(tmp_path):
    """A config whose broker port nothing listens on yet; `up()` starts a tansu there and returns its PID
    (stopped at the end)."""
    config = stack_config(tmp_path / "stack")
    pids: list[int] = []

    def up() -> int:
        broker = start_tansu(config.stack.broker_host, config.stack.broker_port, config.stack.data_dir, None)
        pids.append(broker.pid)
        ensure_topics(config.kafka)
        return broker.pid

    yield config, up
    for pid in pids:
        processes.stop(pid)


def test_broker_down_spools_then_broker_up_replays_exactly_and_returns_to_direct(absent_broker, tmp_path):
    config, broker_up = absent_broker
    topic = config.kafka.session_events_topic
    tally = Tally()
    writer = KafkaWriter(config.kafka, Spool(tmp_path / "spool"), ack_timeout_s=1.0,
                         listener=tally).start()
    try:
        down = make_records(topic, 0, 40)
        for chunk in (down[:15], down[15:]):
            writer.write(chunk)  # returns at once: durable in the spool
        assert not writer.direct() and tally.parked == 40 and writer.spool.pending() == 40

        broker_up()
        processes.wait_until(writer.direct, 60, "the writer draining its spool")
        up = make_records(topic, 40, 10)
        writer.write(up)
        assert tally.sent == 10 and tally.replayed == 40 and writer.spool.stats().pending == 0
    finally:
        writer.close()
    assert_exactly(read_all(config, topic, want=50), down + up)


def test_a_spool_left_by_a_writer_without_kafka_is_replayed_first_by_the_next(fresh_topics, tmp_path):
    from liverl.io.processes import free_port

    topic = fresh_topics.kafka.model_calls_topic
    kafka = fresh_topics.kafka
    unreachable = kafka.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    first = KafkaWriter(unreachable, Spool(tmp_path / "spool"), ack_timeout_s=0.5).start()
    spooled = make_records(topic, 0, 12)
    first.write(spooled)
    first.close(drain_timeout_s=0.5)

    tally = Tally()
    second = KafkaWriter(kafka, Spool(tmp_path / "spool"), ack_timeout_s=5.0, listener=tally)
    assert not second.direct()  # a restarted writer drains before anything goes direct
    later = make_records(topic, 12, 6)
    try:
        second.start()
        second.write(later)  # queued behind the spool: per-key order holds
        processes.wait_until(second.direct, 60, "the writer draining its spool")
    finally:
        second.close()
    assert tally.sent + tally.replayed == 18 and tally.replayed >= 12
    assert_exactly(read_all(fresh_topics, topic, want=18), spooled + later)


def test_direct_writes_land_on_the_default_murmur2_partition_of_their_key(fresh_topics, tmp_path):
    """The writer must pick the partition every other Kafka client picks for that key."""
    from kafka.partitioner.default import murmur2

    topic = fresh_topics.kafka.session_events_topic
    writer = KafkaWriter(fresh_topics.kafka, Spool(tmp_path / "spool"), ack_timeout_s=5.0).start()
    records = make_records(topic, 0, 60, sessions=17)
    try:
        for chunk in (records[:25], records[25:]):  # the second chunk hits the cached hashes
            writer.write(chunk)
        assert writer.direct()
    finally:
        writer.close()
    received = read_all(fresh_topics, topic, want=60)
    partitions = fresh_topics.kafka.partitions
    assert {r.partition for r in received} != {0}
    assert all(r.partition == (murmur2(r.key) & 0x7FFFFFFF) % partitions for r in received)
    assert_exactly(received, records)


def test_a_broker_lost_mid_run_sends_the_next_write_to_the_spool(absent_broker, tmp_path):
    config, broker_up = absent_broker
    topic = config.kafka.session_events_topic
    broker = broker_up()
    tally = Tally()
    writer = KafkaWriter(config.kafka, Spool(tmp_path / "spool"), ack_timeout_s=1.0,
                         listener=tally).start()
    try:
        writer.write(make_records(topic, 0, 10))
        assert writer.direct() and tally.sent == 10
        processes.stop(broker)
        writer.write(make_records(topic, 10, 10))  # returns once durable in the spool
        assert not writer.direct() and tally.parked == 10 and writer.spool.pending() == 10
    finally:
        writer.close(drain_timeout_s=0.5)


def test_librdkafka_gets_the_same_security_settings_under_its_own_names():
    kafka = KafkaConfig(bootstrap_servers="a:9093,b:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                        sasl_username="liverl", sasl_password="secret", ssl_cafile="/etc/ca.pem")
    assert kafka.librdkafka_settings() == {
        "bootstrap.servers": "a:9093,b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "liverl", "sasl.password": "secret", "ssl.ca.location": "/etc/ca.pem"}


def test_settings_librdkafka_cannot_use_are_refused_at_start(tmp_path):
    from liverl.io.processes import free_port

    kafka = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism="NO-SUCH-MECHANISM", sasl_username="u", sasl_password="p")
    with pytest.raises(KafkaSettingsRefused, match="SASL mechanism"):
        KafkaWriter(kafka, Spool(tmp_path / "spool"), ack_timeout_s=0.5).start()
