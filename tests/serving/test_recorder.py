"""Recording never fails a request: with Kafka down records are spooled and counted, then replayed."""

import time

from liverl.contracts import names
from liverl.v1 import model_call_pb2
from serving.metrics import ServingMetrics
from serving.recording.recorder import Recorder
from tests.serving.conftest import read_topic


def _call(i: int) -> model_call_pb2.ModelCall:
    return model_call_pb2.ModelCall(event_id=f"e{i}", request_id=f"r{i}", session_id=f"s{i % 2}", tenant_id="demo",
                                    schema_version=names.EVENT_SCHEMA_VERSION, policy_version="7",
                                    completion_token_ids=[5, 6], completion_logprobs=[-1.0, -2.0])


def test_kafka_down_spools_then_replays_in_order(fresh_topics, tmp_path):
    from liverl.io.processes import free_port

    down = fresh_topics.model_copy(deep=True)
    down.kafka.bootstrap_servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    metrics = ServingMetrics()
    recorder = Recorder(down.kafka, tmp_path / "spool", metrics).start()
    started = time.monotonic()
    for i in range(3):
        recorder.record_later(lambda i=i: _call(i), int(time.time() * 1000))  # returns at once whatever Kafka's state
    assert time.monotonic() - started < 5.0, "record_later() must not wait for Kafka"
    recorder.close(timeout_s=30)
    assert metrics.value("liverl_serving_records_total", {"outcome": "spooled"}) == 3
    assert recorder.spool.pending()

    metrics = ServingMetrics()
    recorder = Recorder(fresh_topics.kafka, tmp_path / "spool", metrics).start()
    try:
        recorder.record_later(lambda: _call(3), int(time.time() * 1000))
        records = read_topic(fresh_topics, fresh_topics.kafka.model_calls_topic, expect=4)
    finally:
        recorder.close()
    calls = [model_call_pb2.ModelCall.FromString(r.value) for r in records]
    assert sorted(c.request_id for c in calls) == ["r0", "r1", "r2", "r3"]
    # Order kept per session: the new record waited behind the spooled ones.
    assert [c.request_id for c in calls if c.session_id == "s0"] == ["r0", "r2"]
    assert [c.request_id for c in calls if c.session_id == "s1"] == ["r1", "r3"]
    # r3 queued behind the spool, or (had the spool drained first) went straight to Kafka after it
    replayed = metrics.value("liverl_serving_records_total", {"outcome": "replayed"})
    assert replayed >= 3 and replayed + metrics.value("liverl_serving_records_total", {"outcome": "sent"}) == 4
    assert not recorder.spool.pending()


def test_full_queue_overflows_to_the_spool_and_a_full_spool_drops_counted(fresh_topics, tmp_path):
    probe = Recorder(fresh_topics.kafka, tmp_path / "probe", ServingMetrics(), queue_size=1)
    probe.record_later(lambda: _call(0), int(time.time() * 1000))
    # overflows into the probe's spool: the size of one spooled record
    probe.record_later(lambda: _call(1), int(time.time() * 1000))
    one_record = probe.spool.size_bytes()
    metrics = ServingMetrics()
    # Not started: nothing drains the queue, so the second record overflows; the spool holds one record at most.
    recorder = Recorder(fresh_topics.kafka, tmp_path / "spool", metrics, queue_size=1,
                        spool_max_bytes=one_record + one_record // 2)
    for i in range(3):
        recorder.record_later(lambda i=i: _call(i), int(time.time() * 1000))
    assert metrics.value("liverl_serving_records_total", {"outcome": "spooled"}) == 1
    assert metrics.value("liverl_serving_records_total", {"outcome": "dropped"}) == 1
