"""serving.tls_cert_file / tls_key_file: both APIs speak TLS only; a plaintext client gets nothing served."""

import ssl

import grpc
import httpx
import pytest

from liverl.config import LiverlConfig
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import ServerThread, serving_config
from tests.tls_certificates import self_signed


def test_both_apis_speak_tls_only(tmp_path, tiny_policy_dir):
    cert_file, key_file = self_signed(tmp_path)
    base = LiverlConfig()
    base.stack.data_dir = tmp_path / "data"
    config = serving_config(base, tmp_path, "tls", policy_dir=tiny_policy_dir, record=False)
    config.serving = config.serving.model_validate(  # the two files are validated together, not one by one
        {**config.serving.model_dump(), "tls_cert_file": cert_file, "tls_key_file": key_file})
    with ServerThread(config) as server:
        port = server.server.http_port
        trusted = ssl.create_default_context(cafile=str(cert_file))
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=60) as client:
            reply = client.post("/v1/completions", json={"prompt": "fix", "max_tokens": 1})
        assert reply.status_code == 200 and reply.json()["choices"]
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "fix"}, timeout=10)

        credentials = grpc.ssl_channel_credentials(root_certificates=cert_file.read_bytes())
        with grpc.secure_channel(server.grpc_target, credentials) as channel:
            info = serving_pb2_grpc.PolicyServiceStub(channel).ModelInfo(serving_pb2.ModelInfoRequest(), timeout=30)
        assert info.policy_version == "local"
        with grpc.insecure_channel(server.grpc_target) as channel, pytest.raises(grpc.RpcError) as plaintext:
            serving_pb2_grpc.PolicyServiceStub(channel).ModelInfo(serving_pb2.ModelInfoRequest(), timeout=10)
        assert plaintext.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_a_certificate_without_its_key_is_refused():
    with pytest.raises(ValueError, match="tls_cert_file and serving.tls_key_file go together"):
        LiverlConfig.model_validate({"serving": {"tls_cert_file": "/etc/tls.crt"}})
