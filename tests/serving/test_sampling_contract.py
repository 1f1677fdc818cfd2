"""Sampling options a recorded ModelCall could not name truthfully are refused at both APIs, never served
differently from what was asked: temperatures vLLM would raise to 0.01, and min_p / repetition_penalty, which the
trainer cannot score (light engine, loopback only; the hostile tests cover the rest of the contract)."""

from __future__ import annotations

import grpc
import httpx
import numpy as np
import pytest

from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc
from tests.serving.conftest import rejected_total

ACME = {"authorization": "Bearer acme-key"}
CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "fix the file"}]})
COMPLETIONS = ("/v1/completions", {"prompt": "fix the file"})


@pytest.fixture(scope="module")
def client(hostile_server):
    with httpx.Client(base_url=hostile_server.http_base, timeout=60, headers=ACME) as c:
        yield c


def _post(client, route, **fields) -> httpx.Response:
    path, body = route
    return client.post(path, json={**body, "max_tokens": 2, **fields})


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS], ids=["chat", "completions"])
@pytest.mark.parametrize("field, value", [("temperature", 0.005), ("temperature", 1e-5), ("min_p", 0.1),
                                          ("repetition_penalty", 1.1), ("repetition_penalty", 0.9)])
def test_http_refuses_what_the_record_could_not_name(hostile_server, client, route, field, value):
    before = rejected_total(hostile_server)
    response = _post(client, route, **{field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and field in error["message"] and error["type"] == "invalid_request_error"
    assert rejected_total(hostile_server) == before + 1


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS], ids=["chat", "completions"])
@pytest.mark.parametrize("fields", [{"temperature": 0.01}, {"temperature": 0}, {"temperature": 1e-6},
                                    {"min_p": 0}, {"min_p": 0.0}, {"repetition_penalty": 1},
                                    {"repetition_penalty": 1.0}, {"min_p": None, "repetition_penalty": None}])
def test_http_serves_the_neutral_values(client, route, fields):
    response = _post(client, route, **fields)
    assert response.status_code == 200, response.text


def test_grpc_refuses_temperatures_the_engine_would_raise(hostile_server):
    with grpc.insecure_channel(hostile_server.grpc_target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)

        def generate(temperature: float):
            return stub.Generate(serving_pb2.GenerateRequest(prompt="fix the file", sampling=common_pb2.SamplingParams(
                temperature=temperature, max_tokens=2, seed=3)), metadata=tuple(ACME.items()), timeout=60)

        with pytest.raises(grpc.RpcError) as refused:
            generate(0.005)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "temperature" in refused.value.details()
        assert generate(float(np.float32(0.01))).token_ids  # proto floats carry 0.01 as 0.0099999998: served
