"""`liverl capture` killed (SIGKILL) and restarted on the same spool: nothing it acknowledged is lost."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from ingest.sdk import CaptureClient
from liverl.io import processes
from tests.ingest.conftest import assert_sessions_complete, capture_config, events_of, read_topic


def start_capture(config, bootstrap: str, log: Path):
    """`liverl capture` as its own process; returns it once it printed its ready line."""
    ingest, kafka = config.ingest, config.kafka
    argv = [sys.executable, "-m", "liverl.cli", "capture", "--log-level", "WARNING",
            "--kafka.bootstrap_servers", bootstrap, "--kafka.session_events_topic", kafka.session_events_topic,
            "--kafka.dead_letters_topic", kafka.dead_letters_topic,
            "--ingest.grpc_port", str(ingest.grpc_port), "--ingest.http_port", str(ingest.http_port),
            "--ingest.metrics_port", "0", "--ingest.spool_dir", str(ingest.spool_dir),
            "--ingest.kafka_ack_timeout_s", "1", "--ingest.tenant_tokens", '{"acme": "acme-token"}',
            "--privacy.keys_dir", str(config.privacy.keys_dir)]  # the key store the test's reader opens with
    offset = log.stat().st_size if log.exists() else 0
    process = processes.start("capture", argv, log, cwd=Path(__file__).resolve().parents[2])
    processes.wait_until(lambda: "capture ready grpc=" in log.read_text()[offset:], 60, "liverl capture",
                         process, log)
    return process


def kill(process) -> None:
    os.kill(process.pid, signal.SIGKILL)  # no goodbye: only what was durable survives
    process.wait(timeout=30)


def test_acknowledged_events_in_the_spool_survive_a_kill(fresh_topics, tmp_path):
    from liverl.io.processes import free_port

    config = capture_config(fresh_topics, tmp_path / "service-spool")
    log = tmp_path / "capture.log"
    service = start_capture(config, f"127.0.0.1:{free_port()}", log)  # Kafka unreachable: all goes to the spool
    try:
        client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "acme-token", None)
        sessions = [client.start_session(task_family="coding", user_id=f"u{i}") for i in range(2)]
        for s in sessions:
            for step in range(10):
                s.user_message(f"step {step}")
        assert client.flush(timeout_s=60), client.stats()  # acknowledged = fsync'd in the service's spool
        client.close()
        kill(service)
        service = start_capture(config, fresh_topics.kafka.bootstrap_servers, log)
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=22, timeout_s=60))
    finally:
        processes.stop(service.pid)
    assert_sessions_complete(events, {s.session_id: 11 for s in sessions})


def test_a_kill_mid_stream_loses_nothing_the_sdk_recorded(fresh_topics, tmp_path):
    config = capture_config(fresh_topics, tmp_path / "service-spool")
    log = tmp_path / "capture.log"
    service = start_capture(config, fresh_topics.kafka.bootstrap_servers, log)
    client = CaptureClient(f"127.0.0.1:{config.ingest.grpc_port}", "acme-token", tmp_path / "sdk-spool",
                           batch_size=8, request_timeout_s=3)
    sessions = [client.start_session(task_family="coding", user_id=f"u{i}") for i in range(3)]
    halfway = threading.Event()

    def stream() -> None:
        for step in range(40):
            for s in sessions:
                s.user_message(f"step {step}")
            if step == 15:
                halfway.set()
            time.sleep(0.02)

    streamer = threading.Thread(target=stream)
    try:
        streamer.start()
        assert halfway.wait(30)
        kill(service)
        service = start_capture(config, fresh_topics.kafka.bootstrap_servers, log)
        streamer.join()
        assert client.flush(timeout_s=60), client.stats()
        assert client.stats()["retries"] > 0  # the SDK did meet the dead service
        events = events_of(read_topic(config, config.kafka.session_events_topic, want=3 * 41, timeout_s=60))
    finally:
        streamer.join()
        client.close()
        processes.stop(service.pid)
    assert_sessions_complete(events, {s.session_id: 41 for s in sessions})
