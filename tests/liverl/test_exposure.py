"""Beyond loopback, the shipped capture token is refused before anything binds; the pseudonym salt is gone."""

import pytest

from liverl.config import LiverlConfig
from liverl.config.exposure import is_loopback, refuse_shipped_secrets
from liverl.config.redaction import RedactionConfig


def test_loopback_keeps_the_shipped_defaults():
    refuse_shipped_secrets("127.0.0.1", "ingest.host", RedactionConfig(), {"demo": "demo-token"})
    refuse_shipped_secrets("localhost", "serving.host", RedactionConfig())
    assert is_loopback("::1") and not is_loopback("0.0.0.0") and not is_loopback("capture.internal")


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.7", "capture.internal"])
def test_beyond_loopback_the_shipped_token_is_refused_with_what_to_set(host):
    with pytest.raises(ValueError, match="LIVERL_INGEST__TENANT_TOKENS"):
        refuse_shipped_secrets(host, "ingest.host", RedactionConfig(), {"demo": "demo-token", "acme": "s3cret-acme"})
    refuse_shipped_secrets(host, "serving.host", RedactionConfig())  # no salt to refuse: keys are per tenant
    refuse_shipped_secrets(host, "ingest.host", RedactionConfig(), {"acme": "s3cret-acme"})


def test_setting_the_old_pseudonym_salt_says_what_replaced_it():
    with pytest.raises(ValueError, match="each tenant's key from the key store.*Remove the setting"):
        RedactionConfig(pseudonym_salt="a9f3c1e07b2d4e6f")


def test_the_capture_service_refuses_before_binding(tmp_path):
    from ingest.service import CaptureServer

    config = LiverlConfig()
    config.stack.data_dir = tmp_path
    config.ingest.host = "0.0.0.0"
    config.ingest.grpc_port = config.ingest.http_port = config.ingest.metrics_port = 0
    server = CaptureServer(config)
    try:
        with pytest.raises(ValueError, match="shipped capture token"):
            server.start()
        assert server.grpc_port == 0  # nothing was bound
    finally:
        server.stop()
