"""The server as a whole: it refuses to start open beyond loopback, and rate-limits each key on both APIs."""

import grpc
import httpx
import pytest

from liverl.config import LiverlConfig
from liverl.v1 import serving_pb2, serving_pb2_grpc
from tests.serving.conftest import ServerThread, serving_config


def _config(tmp_path, tiny_policy_dir, **serving) -> LiverlConfig:
    base = LiverlConfig()
    base.stack.data_dir = tmp_path / "data"
    return serving_config(base, tmp_path, "limits", policy_dir=tiny_policy_dir, record=False, **serving)


def test_refuses_to_start_open_on_all_interfaces(tmp_path, tiny_policy_dir):
    config = _config(tmp_path, tiny_policy_dir, host="0.0.0.0")
    with pytest.raises(ValueError, match="no API keys"):
        with ServerThread(config):
            pass


def test_each_key_is_rate_limited_on_both_apis(tmp_path, tiny_policy_dir):
    config = _config(tmp_path, tiny_policy_dir, api_keys={"k1": {"tenant": "acme"}, "k2": {"tenant": "acme"}},
                     rate_limit_per_s=0.2, rate_limit_burst=2)
    with ServerThread(config) as server, httpx.Client(base_url=server.http_base, timeout=60) as client:
        k1 = {"authorization": "Bearer k1"}
        codes = [client.post("/v1/completions", json={"prompt": "fix", "max_tokens": 1}, headers=k1).status_code
                 for _ in range(3)]
        limited = client.post("/v1/completions", json={"prompt": "fix"}, headers=k1)
        assert codes == [200, 200, 429] and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["type"] == "rate_limit_error"
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = serving_pb2_grpc.PolicyServiceStub(channel)
            with pytest.raises(grpc.RpcError) as exhausted:
                stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=(("authorization", "Bearer k1"),), timeout=10)
            other_key = stub.ModelInfo(serving_pb2.ModelInfoRequest(), metadata=(("authorization", "Bearer k2"),),
                                       timeout=10)
        assert exhausted.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert other_key.policy_version == "local"
        assert server.server.metrics.value("liverl_serving_rejected_requests_total", {"reason": "rate-limited"}) == 3
