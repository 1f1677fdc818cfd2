"""The assembled service: TLS, the spool limit, and config that names what to fix."""

from __future__ import annotations

import pytest

from ingest.sdk import CaptureClient
from liverl.config import load_config
from tests.ingest.conftest import capture_config, events_of, read_topic
from tests.tls_certificates import self_signed


def test_tls_serves_the_sdk_and_refuses_plaintext(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    cert_file, key_file = self_signed(tmp_path)
    config = capture_config(fresh_topics, tmp_path / "spool", tls_cert_file=cert_file, tls_key_file=key_file)
    server = CaptureServer(config).start()
    try:
        client = CaptureClient(server.grpc_address, "acme-token", None, root_certificates=cert_file.read_bytes())
        client.start_session(task_family="coding").user_message("over TLS")
        assert client.flush(timeout_s=30), client.stats()
        client.close()
        plain = CaptureClient(server.grpc_address, "acme-token", None, request_timeout_s=2)
        plain.start_session(task_family="coding")
        assert not plain.flush(timeout_s=3)
        plain.close(timeout_s=0.1)
        assert plain.stats()["sent"] == 0 and plain.stats()["last_error"].startswith("UNAVAILABLE")
        import httpx

        health = httpx.get(f"https://{server.http_address}/healthz", verify=str(cert_file))
        assert health.status_code == 200
    finally:
        server.stop()
    assert len(events_of(read_topic(config, config.kafka.session_events_topic, want=2))) == 2


def test_a_full_spool_stops_acknowledging_instead_of_losing(tmp_path):
    from ingest.service import CaptureServer
    from liverl.io.processes import free_port

    base = load_config(overrides=["--kafka.bootstrap_servers", f"127.0.0.1:{free_port()}"], environ={})
    # room for a batch or two of sealed records (each carries its nonce, tag and the liverl-sealed header)
    config = capture_config(base, tmp_path / "spool", max_spool_bytes=3000, kafka_ack_timeout_s=0.5)
    config.privacy.keys_dir = tmp_path / "keys"
    server = CaptureServer(config).start()
    try:
        client = CaptureClient(server.grpc_address, "acme-token", tmp_path / "sdk", batch_size=5)
        session = client.start_session(task_family="coding")
        for step in range(40):
            session.user_message(f"step {step} " + "x" * 50)
        assert not client.flush(timeout_s=5)
        stats = client.stats()
        client.close(timeout_s=0.1)
    finally:
        server.stop()
    assert 0 < stats["sent"] < 41 and stats["dropped"] == 0
    assert "UNAVAILABLE" in stats["last_error"] and "retry" in stats["last_error"]
    assert stats["spool_pending"] + stats["queued"] + stats["in_flight"] + stats["sent"] >= 41


def test_ingest_config_errors_name_the_field():
    with pytest.raises(ValueError, match="empty token"):
        from ingest.auth import TokenAuth

        TokenAuth({"acme": ""})
    config = load_config(overrides=["--ingest.opt_out_users", '{"acme": ["u1"]}',
                                    "--ingest.redaction.custom_patterns", '{"ticket": "T-\\\\d+"}'], environ={})
    assert config.ingest.opt_out_users == {"acme": ["u1"]}
    assert config.ingest.redaction.custom_patterns == {"ticket": "T-\\d+"}
    with pytest.raises(ValueError, match="no_such"):
        load_config(overrides=["--ingest.no_such", "1"], environ={})
