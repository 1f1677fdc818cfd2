"""Policy versions for the weight-probe tests: folders carrying the trainer's probe, and what serving answers."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc
from trainer.io.policy_io import load_policy
from trainer.io.weight_probe import measure_weight_probe

PROMPT = [2, 60, 61]


def with_probe(source: Path, out: Path, probe_of: Path | None = None) -> Path:
    """A copy of source with the trainer's weight probe of probe_of (its own weights by default)."""
    shutil.copytree(source, out)
    measure_weight_probe(load_policy(probe_of or source)).write(out)
    return out


def reference(policy_dir: Path, tokens: list[int]) -> list[float]:
    """The logprobs of tokens after PROMPT under policy_dir's weights (a plain fp32 forward pass)."""
    with torch.no_grad():
        logits = load_policy(policy_dir)(torch.tensor([PROMPT + tokens])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    return [float(logprobs[len(PROMPT) - 1 + i, t]) for i, t in enumerate(tokens)]


def generate(channel) -> serving_pb2.GenerateResponse:
    return serving_pb2_grpc.PolicyServiceStub(channel).Generate(serving_pb2.GenerateRequest(
        prompt_token_ids=PROMPT, sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=6, seed=3)),
        timeout=120)


def probe_count(server, outcome: str) -> float:
    return server.server.metrics.value("liverl_serving_weight_probes_total", {"outcome": outcome})
