"""The broker stopped and restarted mid-stream: nothing lost, order kept per session.

The test runs its own tansu broker on memory storage, so a restart empties it: what the broker held
is read before the stop, what the capture service spooled while it was down is read after the
restart, and the union must hold every event, the first copy of each in recording order.
"""

from __future__ import annotations

import pytest

from infra.embedded.broker import start_tansu
from infra.embedded.topics import ensure_topics
from ingest.sdk import CaptureClient
from liverl.io import processes
from tests.conftest import stack_config
from tests.ingest.conftest import assert_sessions_complete, capture_config, events_of, read_topic

SESSIONS = 3
EVENTS_PER_PHASE = 15


@pytest.fixture
def own_broker(tmp_path):
    config = stack_config(tmp_path / "stack")
    broker = start_tansu(config.stack.broker_host, config.stack.broker_port, config.stack.data_dir, None)
    ensure_topics(config.kafka)
    state = {"pid": broker.pid}
    yield config, state
    processes.stop(state["pid"])


def record_phase(sessions, phase: int) -> None:
    for step in range(EVENTS_PER_PHASE):
        for s in sessions:
            if step % 2:
                s.tool_result(f"c{phase}-{step}", "ok")
            else:
                s.user_message(f"phase {phase} step {step}")


def test_broker_stop_and_restart_mid_stream_loses_nothing_and_keeps_order(own_broker, tmp_path):
    from ingest.service import CaptureServer

    base, broker = own_broker
    config = capture_config(base, tmp_path / "service-spool", kafka_ack_timeout_s=1.0)
    server = CaptureServer(config).start()
    client = CaptureClient(server.grpc_address, "acme-token", tmp_path / "sdk-spool")
    topic = config.kafka.session_events_topic
    try:
        sessions = [client.start_session(task_family="coding", user_id=f"u{i}") for i in range(SESSIONS)]
        record_phase(sessions, 1)
        assert client.flush(timeout_s=30)
        before = read_topic(config, topic, want=SESSIONS * (1 + EVENTS_PER_PHASE))
        assert len(before) >= SESSIONS * (1 + EVENTS_PER_PHASE)

        processes.stop(broker["pid"])  # mid-session: the sessions go on recording
        record_phase(sessions, 2)
        for s in sessions:
            s.end("completed")
        assert client.flush(timeout_s=60), client.stats()  # acknowledged by the service: in its spool
        assert not server.delivery.direct()
        assert server.metrics.registry.get_sample_value("liverl_ingest_records_spooled_total") > 0

        restarted = start_tansu(config.stack.broker_host, config.stack.broker_port, config.stack.data_dir, None)
        broker["pid"] = restarted.pid
        ensure_topics(config.kafka)
        processes.wait_until(server.delivery.direct, 90, "capture service draining its spool")
        after = read_topic(config, topic, want=SESSIONS * (EVENTS_PER_PHASE + 1))
    finally:
        client.close()
        server.stop()
    assert server.metrics.registry.get_sample_value("liverl_ingest_records_drained_total") > 0
    total = 2 + 2 * EVENTS_PER_PHASE
    assert_sessions_complete(events_of(before) + events_of(after), {s.session_id: total for s in sessions})
    assert client.stats()["dropped"] == 0 and client.stats()["rejected"] == 0

