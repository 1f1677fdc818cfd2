"""One completion, whatever API asked for it: lease a version, tokenize, stream, record.

Both APIs call `Completions.begin()` (which fixes the version, so a response header can carry it
before the first token) and then iterate `Call.stream()`. The ModelCall is handed to the recorder
after the last token, as an O(1) queue put: recording never delays or fails a response.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2
from serving.engine import Delta, Sampling
from serving.metrics import ServingMetrics
from serving.router import Router, Slot

ROLES = {"single": common_pb2.AGENT_ROLE_SINGLE, "orchestrator": common_pb2.AGENT_ROLE_ORCHESTRATOR,
         "subagent": common_pb2.AGENT_ROLE_SUBAGENT, "": common_pb2.AGENT_ROLE_UNSPECIFIED}


class BadRequest(ValueError):
    """The request cannot be served as sent; the message says what to change."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class Caller:
    """Who asks: from gRPC metadata, HTTP headers or the request body."""

    api: str  # "grpc" | "openai-chat" | "openai-completions"
    session_id: str = ""
    agent_role: int = common_pb2.AGENT_ROLE_UNSPECIFIED
    agent_id: str = ""
    tenant_id: str = ""
    request_id: str = ""


def parse_role(value: str) -> int:
    try:
        return ROLES[value.strip().lower()]
    except KeyError:
        raise BadRequest("bad-agent-role", f"agent role {value!r} is not one of single, orchestrator, subagent")


@dataclass
class StreamPiece:
    """What a client gets per step: new text and the tokens behind it."""

    text: str
    delta: Delta


@dataclass
class Call:
    """One leased completion. stream() must be iterated (or close() called) to release the lease."""

    completions: "Completions"
    slot: Slot
    caller: Caller
    sampling: Sampling
    prompt_token_ids: list[int]
    request_id: str
    started: float = field(default_factory=time.time)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""
    first_token_time: float = 0.0
    _released: bool = False

    @property
    def version(self) -> str:
        return self.slot.version

    async def stream(self) -> AsyncIterator[StreamPiece]:
        ok = False
        try:
            async for delta in self.slot.engine.generate(self.prompt_token_ids, self.sampling, self.request_id):
                if delta.token_ids and not self.first_token_time:
                    self.first_token_time = time.time()
                self.token_ids.extend(delta.token_ids)
                self.logprobs.extend(delta.logprobs)
                new_text = self._advance_text()
                if delta.finish_reason:
                    self.finish_reason = delta.finish_reason
                yield StreamPiece(new_text, delta)
            ok = True
        finally:
            self.close(ok)

    async def run(self) -> "Call":
        async for _ in self.stream():
            pass
        return self

    def _advance_text(self) -> str:
        text = self.slot.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        for stop in self.sampling.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        new = text[len(self.text):] if text.startswith(self.text) else ""
        self.text = text
        return new

    def close(self, ok: bool = False) -> None:
        if self._released:
            return
        self._released = True
        self.completions.finish(self, ok)


class Completions:
    def __init__(self, router: Router, recorder, metrics: ServingMetrics, model_name: str, max_model_len: int,
                 default_max_tokens: int, default_tenant: str):
        self.router = router
        self.recorder = recorder
        self.metrics = metrics
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.default_max_tokens = default_max_tokens
        self.default_tenant = default_tenant

    def sampling(self, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                 max_tokens: int | None = None, seed: int | None = None, stop=None) -> Sampling:
        """Apply defaults and check ranges; unset values (None) take the server's defaults."""
        if isinstance(stop, str):
            stop = [stop]
        sampling = Sampling(
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if not top_p else float(top_p),
            top_k=int(top_k or 0),
            max_tokens=self.default_max_tokens if not max_tokens else int(max_tokens),
            seed=int(seed or 0),
            stop=tuple(stop or ()),
        )
        if not (0.0 <= sampling.temperature <= 100.0) or math.isnan(sampling.temperature):
            raise BadRequest("bad-sampling", f"temperature {sampling.temperature} is out of range: use 0 (greedy) to 2")
        if not (0.0 < sampling.top_p <= 1.0):
            raise BadRequest("bad-sampling", f"top_p {sampling.top_p} is out of range: use a value in (0, 1]")
        if sampling.top_k < 0:
            raise BadRequest("bad-sampling", f"top_k {sampling.top_k} is negative: use 0 to disable it")
        if sampling.max_tokens < 0:
            raise BadRequest("bad-sampling", f"max_tokens {sampling.max_tokens} is negative")
        return sampling

    def begin(self, caller: Caller, prompt: str | None, prompt_token_ids: list[int] | None,
              sampling: Sampling) -> Call:
        """Lease the version that will serve this request and tokenize the prompt with its tokenizer."""
        slot = self.router.acquire()
        try:
            ids = list(prompt_token_ids or [])
            if not ids:
                if not prompt:
                    raise BadRequest("empty-prompt", "the prompt is empty: send prompt text or prompt_token_ids")
                ids = list(slot.tokenizer(prompt, add_special_tokens=True)["input_ids"])
            vocab = len(slot.tokenizer)
            if any(i < 0 or i >= vocab for i in ids):
                raise BadRequest("bad-token-id", f"prompt_token_ids must lie in [0, {vocab}) for this policy")
            if len(ids) + sampling.max_tokens > self.max_model_len:
                raise BadRequest("too-long", f"prompt ({len(ids)} tokens) + max_tokens ({sampling.max_tokens}) "
                                 f"exceeds the model length {self.max_model_len}: shorten the prompt or max_tokens")
        except BaseException:
            slot.release(True, 0.0)
            raise
        request_id = caller.request_id or f"req-{uuid.uuid4().hex}"
        self.metrics.in_flight.labels(slot.version).inc()
        return Call(self, slot, caller, sampling, ids, request_id)

    def finish(self, call: Call, ok: bool) -> None:
        """Account for a finished (or failed, or abandoned) call and record what it generated."""
        latency = time.time() - call.started
        call.slot.release(ok, latency)
        version = call.slot.version
        self.metrics.in_flight.labels(version).dec()
        self.metrics.requests.labels(version, call.caller.api, "ok" if ok else "error").inc()
        self.metrics.latency.labels(version).observe(latency)
        self.metrics.prompt_tokens.labels(version).inc(len(call.prompt_token_ids))
        self.metrics.completion_tokens.labels(version).inc(len(call.token_ids))
        if call.token_ids and self.recorder is not None:
            self.recorder.record(self.model_call(call, ok))

    def model_call(self, call: Call, ok: bool) -> model_call_pb2.ModelCall:
        caller, s = call.caller, call.sampling
        finish_ms = int(time.time() * 1000)
        return model_call_pb2.ModelCall(
            event_id=uuid.uuid4().hex,
            request_id=call.request_id,
            session_id=caller.session_id,
            tenant_id=caller.tenant_id or self.default_tenant,
            schema_version=names.EVENT_SCHEMA_VERSION,
            agent_role=caller.agent_role,
            agent_id=caller.agent_id or "main",
            policy_version=call.slot.version,
            model_name=self.model_name,
            prompt_token_ids=call.prompt_token_ids,
            completion_token_ids=call.token_ids,
            completion_logprobs=call.logprobs,
            sampling=common_pb2.SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                               max_tokens=s.max_tokens, seed=s.seed, stop=list(s.stop)),
            request_time_ms=int(call.started * 1000),
            first_token_time_ms=int(call.first_token_time * 1000) if call.first_token_time else 0,
            finish_time_ms=finish_ms,
            finish_reason=call.finish_reason if ok else (call.finish_reason or "abort"),
            api=caller.api,
        )
