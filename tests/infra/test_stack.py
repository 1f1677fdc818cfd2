"""The embedded stack starts for real, answers its health checks, survives restarts (disk), and stops by PID."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.embedded.stack import down, read_record, status, up
from liverl.io import processes
from tests.conftest import stack_config


def test_stack_fixture_is_healthy(stack):
    rows = status(stack)
    assert {row["name"] for row in rows} == {"broker", "mlflow"}
    assert all(row["alive"] and row["healthy"] for row in rows)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=[bootstrap], acks="all", enable_idempotence=True)
    for value in values:
        producer.send(topic, key=b"session", value=value)
    producer.flush()
    producer.close()


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=[bootstrap], enable_auto_commit=False)
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(record.value for record in records)
    consumer.close()
    return values


def test_disk_broker_keeps_records_across_restart_and_down_stops_every_pid(tmp_path):
    config = stack_config(tmp_path, storage="disk")
    try:
        up(config, say=lambda *_: None)
        pids = [item.pid for item in read_record(config)]
        assert {item.name for item in read_record(config)} == {"broker", "broker-s3", "mlflow"}
        topic = config.kafka.session_events_topic
        _produce(config.kafka.bootstrap_servers, topic, [b"before-1", b"before-2"])

        broker = next(item for item in read_record(config) if item.name == "broker")
        processes.stop(broker.pid)
        up(config, say=lambda *_: None)  # restarts only what died
        assert next(item for item in read_record(config) if item.name == "broker").pid != broker.pid

        _produce(config.kafka.bootstrap_servers, topic, [b"after-1"])
        assert _read_all(config.kafka.bootstrap_servers, topic, 3) == [b"before-1", b"before-2", b"after-1"]
    finally:
        down(config, say=lambda *_: None)
    assert not any(processes.alive(pid) for pid in pids)
    assert read_record(config) == []


def test_status_command_shows_health_and_loop_state(stack, capsys):
    from infra.commands import status as status_command

    assert status_command.run(stack, None) == 0
    out = capsys.readouterr().out
    assert "broker" in out and "mlflow" in out
    assert f"registry {stack.mlflow.registered_model}" in out and "no trajectory table yet" in out


def test_up_refuses_a_taken_port_and_names_the_setting(stack, tmp_path):
    config = stack_config(tmp_path)
    config.stack.broker_port = stack.stack.broker_port  # the session stack's broker holds it
    try:
        up(config, say=lambda *_: None)
        raise AssertionError("up() started a broker on a taken port")
    except RuntimeError as error:
        assert "stack.broker_port" in str(error)
    finally:
        down(config, say=lambda *_: None)
