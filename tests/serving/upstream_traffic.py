"""What the upstream fleet's tests and bench share: adapter folders with the trainer's weight probe, and requests
through an UpstreamFleet sent without pause (each worker picks a server for the route it is told, asks it for one
greedy token and records who answered what).

A request its server failed (the connection broke; a 5xx: a vLLM server shutting down answers the requests in
flight with 500 EngineDeadError; or a 200 with finish_reason "abort", which it answers them with too) is reported to
the fleet and sent once more to another pick, as the upstream engine does; anything else (a 4xx such as an unknown
model, no server to pick, a second failure) is a failure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from serving.engines.upstream.fleet import NoUpstreamServer, UpstreamFleet


def probed(base_dir: Path, adapter_dir: Path) -> Path:
    """The trainer's weight probe of base + adapter, written into the adapter folder (as its export does)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.io.weight_probe import measure_weight_probe

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    measure_weight_probe(PeftModel.from_pretrained(model, str(adapter_dir)).eval()).write(adapter_dir)
    return adapter_dir


@dataclass(frozen=True)
class Answer:
    at: float  # time.perf_counter() when the answer came
    server: str  # the URL that answered
    model: str  # the model the request named (an adapter's name or the base)
    token: int  # the greedy token


@dataclass
class Traffic:
    fleet: UpstreamFleet
    route: str | None  # the adapter requests name now (None: the base); the caller switches it as a router would
    prompt: list[int]
    api_key: str
    workers: int = 2
    timeout_s: float = 120.0
    answers: list[Answer] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    retried: int = 0  # transport failures sent again to another server

    async def __aenter__(self) -> Traffic:
        self._stop = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=self.timeout_s, headers={"Authorization": f"Bearer {self.api_key}"})
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self._client.aclose()

    def by_server(self, since: float = 0.0) -> dict[str, int]:
        counts: dict[str, int] = {}
        for answer in self.answers:
            if answer.at >= since:
                counts[answer.server] = counts.get(answer.server, 0) + 1
        return counts

    async def _worker(self) -> None:
        while not self._stop.is_set():
            await self._one(self.route)

    async def _one(self, route: str | None) -> None:
        model = self.fleet.model_for(route)
        for attempt in range(2):
            try:
                url = self.fleet.pick(route)
            except NoUpstreamServer as error:
                self.failures.append(str(error))
                await asyncio.sleep(0.1)
                return
            try:
                response = await self._client.post(f"{url}/v1/completions", json={
                    "model": model, "prompt": self.prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": 0})
                failed = f"HTTP {response.status_code} {response.text[:200]}" if response.status_code >= 500 else None
                if response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "abort":
                    failed = "aborted (finish_reason \"abort\": the server is stopping)"
            except httpx.TransportError as error:
                failed = f"{type(error).__name__}: {error}"
            if failed:
                self.fleet.report_failure(url, failed)
                if attempt == 0:
                    self.retried += 1
                    continue
                self.failures.append(f"{url} {model}: {failed}")
                return
            if response.status_code != 200:
                self.failures.append(f"{url} {model}: HTTP {response.status_code} {response.text[:200]}")
                return
            token = response.json()["choices"][0]["logprobs"]["tokens"][0]  # "token_id:67" (token ids as tokens)
            self.answers.append(Answer(time.perf_counter(), url, model, int(token.removeprefix("token_id:"))))
            return
