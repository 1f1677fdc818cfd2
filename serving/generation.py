"""One completion, whatever API asked for it: lease a version, tokenize, stream, record.

Both APIs call `Completions.begin()` (which fixes the version, so a response header can carry it
before the first token) and then iterate `Call.stream()`. The ModelCall is handed to the recorder
after the last token, as an O(1) queue put: recording never delays or fails a response.
A call that names no session is recorded as a session of its own whose id is its request id, so
feedback on that one reply can still make it trainable (serving.recording.session_ids).

The input contract both APIs share lives here too: `sampling()` checks every sampling value against
its real range and refuses (BadRequest) what it cannot serve exactly as asked, never coercing it, and
`begin()` bounds the prompt and tokenizes it off the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from liverl.access.opt_out import OptOut
from liverl.config.redaction import RedactionConfig
from liverl.contracts import names
from liverl.v1 import common_pb2, model_call_pb2
from serving.engines import tokens
from serving.engines.engine import Delta, Sampling
from serving.metrics import ServingMetrics
from serving.router import Router, Slot

if TYPE_CHECKING:
    from liverl.redaction import Redactor
    from serving.recording.recorder import Recorder
    from serving.recording.stitching import Stitcher

GREEDY_BELOW = 1e-5  # vLLM samples greedily below this temperature (and then ignores top_p and top_k)
# vLLM raises any temperature in (0, 0.01) to 0.01 before sampling, so a request in [GREEDY_BELOW, this) would
# be sampled from another distribution than the one it asked for and the record would name: it is refused.
LOWEST_SAMPLED_TEMPERATURE = 0.01
FLOAT32_SLACK = 1e-9  # gRPC's float 0.01 arrives as 0.0099999998: served (and recorded) as the 0.01 applied
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
MAX_ID_CHARS = 256  # session, agent and request ids
# Prompts up to this long are tokenized on the event loop (tens of microseconds with a fast tokenizer);
# longer ones on a worker thread, so a megabyte prompt never stalls the loop that answers health checks.
INLINE_TOKENIZE_CHARS = 4096

ROLES = {"single": common_pb2.AGENT_ROLE_SINGLE, "orchestrator": common_pb2.AGENT_ROLE_ORCHESTRATOR,
         "subagent": common_pb2.AGENT_ROLE_SUBAGENT, "": common_pb2.AGENT_ROLE_UNSPECIFIED}


class BadRequest(ValueError):
    """The request cannot be served as sent; the message says what to change."""

    def __init__(self, reason: str, message: str, param: str | None = None):
        super().__init__(message)
        self.reason = reason  # a stable label: metrics, dead letters, the error body's "code"
        self.param = param  # the request field at fault, when one is


class DeadlineExceeded(TimeoutError):
    """A completion ran past serving.request_timeout_s."""


DEADLINE_MESSAGE = "the completion ran past serving.request_timeout_s: ask for fewer max_tokens or retry later"


@dataclass
class Caller:
    """Who asks: from gRPC metadata, HTTP headers or the request body."""

    api: str  # "grpc" | "openai-chat" | "openai-completions" | "openai-responses"
    session_id: str = ""
    agent_role: int = common_pb2.AGENT_ROLE_UNSPECIFIED
    agent_id: str = ""
    tenant_id: str = ""
    request_id: str = ""
    user_id: str = ""  # the end user, when the caller names one: an opted-out user's calls are never recorded


def parse_role(value: str) -> int:
    try:
        return ROLES[value.strip().lower()]
    except KeyError:
        raise BadRequest("bad-agent-role", f"agent role {value[:40]!r} is not one of single, orchestrator, "
                         "subagent", names.META_AGENT_ROLE) from None


def role_name(role: int) -> str:
    """The name of an AgentRole value ("" for unspecified); BadRequest for a value the contract lacks."""
    for name, value in ROLES.items():
        if value == role:
            return name
    raise BadRequest("bad-agent-role", f"agent_role {role} is not an AgentRole value", "agent_role")


def check_id(value: str, param: str) -> str:
    """A session, agent or request id as sent, if it is short printable text."""
    if len(value) > MAX_ID_CHARS or not value.isprintable():
        raise BadRequest("bad-id", f"{param} must be printable text of at most {MAX_ID_CHARS} characters", param)
    return value


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
    # The opening of the reply that serving wrote, not the policy (a forced tool call): its tokens end
    # prompt_token_ids, so the record's completion holds only what was sampled.
    forced_text: str = ""
    _released: bool = False

    @property
    def version(self) -> str:
        return self.slot.version

    @property
    def reply_text(self) -> str:
        """The reply as the client reads it: the forced opening, then the sampled text."""
        return self.forced_text + self.text

    @property
    def session_id(self) -> str:
        return self.caller.session_id

    async def stream(self) -> AsyncIterator[StreamPiece]:
        try:
            async for delta in self._deltas():
                yield StreamPiece(self._advance_text(), delta)
        finally:
            self.close()  # abandoned mid-stream: free the lease now, not when the generator is collected

    async def run(self) -> "Call":
        """The whole completion, asked of the engine as one (no first-token time then); its text is decoded
        once, at the end. No code of a consumer runs between its deltas, so one deadline covers them all."""
        ok = False
        try:
            deltas = self.slot.engine.generate(self.prompt_token_ids, self.sampling, self.request_id, True)
            try:
                async with asyncio.timeout_at(_loop_time(self.started + self.completions.request_timeout_s)):
                    async for delta in deltas:
                        self._take(delta)
            except TimeoutError:
                raise DeadlineExceeded(DEADLINE_MESSAGE) from None
            finally:
                await deltas.aclose()  # the engine's clean-up (vLLM aborts an unfinished request) runs now
            if self.forced_text:
                self._end_at_forced_call()
            self._advance_text()
            ok = True
        finally:
            self.close(ok)
        return self

    async def _deltas(self) -> AsyncIterator[Delta]:
        """The engine's deltas, streamed and accumulated on the call; the lease is released (and the call
        recorded) when they end, fail or are abandoned."""
        ok = False
        deltas = _within(self.started + self.completions.request_timeout_s,
                         self.slot.engine.generate(self.prompt_token_ids, self.sampling, self.request_id))
        try:
            async for delta in deltas:
                if delta.token_ids and not self.first_token_time:
                    self.first_token_time = time.time()
                self._take(delta)
                # the whole text is decoded again only when this delta may close the call: a brace is one byte
                closed = bool(self.forced_text) and "}" in tokens.decode(self.slot.tokenizer, delta.token_ids) \
                    and self._end_at_forced_call()
                yield delta
                if closed:
                    break  # the forced call is complete: the engine's generation is cancelled below
            ok = True
        finally:
            await deltas.aclose()  # the engine's clean-up (vLLM aborts an unfinished request) runs now
            self.close(ok)

    def _take(self, delta: Delta) -> None:
        self.token_ids.extend(delta.token_ids)
        self.logprobs.extend(delta.logprobs)
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason

    def _end_at_forced_call(self) -> bool:
        """Under a forced tool call the reply ends where its JSON object closes, as a stop string would end it: the
        tokens sampled after the one that closes the object are dropped (each kept token's logprob is still the
        policy's, given the tokens before it). True when it has closed. A reply whose object never closes is kept
        whole (serving reports the call unmet)."""
        tokenizer = self.slot.tokenizer
        text = tokens.decode(tokenizer, self.token_ids)
        if "}" not in text:
            return False
        end = json_object_end(self.forced_text + text)
        if end is None:
            return False
        needed, low, high = end - len(self.forced_text), 1, len(self.token_ids)
        while low < high:  # the fewest tokens whose text reaches the object's end
            middle = (low + high) // 2
            if len(tokens.decode(tokenizer, self.token_ids[:middle])) >= needed:
                high = middle
            else:
                low = middle + 1
        if low < len(self.token_ids):
            del self.token_ids[low:], self.logprobs[low:]
            self.finish_reason = "stop"
        return True

    def _advance_text(self) -> str:
        text = tokens.decode(self.slot.tokenizer, self.token_ids)
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


def json_object_end(text: str) -> int | None:
    """Where the JSON object that `text` starts with ends (the index after its closing brace); None when it does
    not start with a complete one."""
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return end if isinstance(value, dict) else None


async def _within(deadline: float, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    """deltas until the wall-clock deadline; then the engine's generation is cancelled (its finally runs).
    The timeout wraps each wait for a delta, never a yield (a cancellation must not land in the consumer's
    code), and is a timer on this task rather than wait_for's task per token."""
    iterator = aiter(deltas)
    loop_deadline = _loop_time(deadline)
    try:
        while True:
            try:
                async with asyncio.timeout_at(loop_deadline):
                    delta = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise DeadlineExceeded(DEADLINE_MESSAGE) from None
            yield delta
    finally:
        await iterator.aclose()


def _loop_time(wall_clock: float) -> float:
    """A time.time() instant on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (wall_clock - time.time())


@dataclass(frozen=True)
class CompletionLimits:
    """The bounds of one completion (from ServingConfig)."""

    max_model_len: int
    default_max_tokens: int
    max_prompt_chars: int
    request_timeout_s: float


class Completions:
    def __init__(self, router: Router, recorder: Recorder | None, metrics: ServingMetrics, model_name: str,
                 limits: CompletionLimits, default_tenant: str, redaction: RedactionConfig | None = None,
                 opt_out: OptOut | None = None):
        self.router = router
        self.recorder = recorder
        self.metrics = metrics
        self.model_name = model_name
        self.limits = limits
        self.max_model_len = limits.max_model_len
        self.request_timeout_s = limits.request_timeout_s
        self.default_tenant = default_tenant
        self._redaction = redaction
        self._redactors: dict[str, Redactor] = {}  # one per tenant: each pseudonymises ids under its own key
        self.opt_out = opt_out or OptOut()
        # The tenant's keyed pseudonym of an end-user id: a session named by OpenAI's `user` is named by it. The
        # server sets the key store's (liverl.privacy.pseudonyms); without one, a key of this process's own.
        self.user_pseudonym: Callable[[str, str], str] = _process_user_pseudonym(secrets.token_bytes(32))
        self.stitcher: Stitcher | None = None  # header-less sessions (serving/recording/stitching.py): the server sets it

    def sampling(self, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                 max_tokens: int | None = None, seed: int | None = None,
                 stop: str | Sequence[str] | None = None) -> Sampling:
        """The sampling to apply and record. None takes the default; anything else must lie in its range.
        Greedy (temperature below 1e-5) is recorded as temperature 0 with top_p 1 and top_k 0, as applied;
        temperatures from 1e-5 to below 0.01 are refused (the engine would sample at 0.01 instead)."""
        temperature = 1.0 if temperature is None else temperature
        if not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
            raise BadRequest("bad-sampling", f"temperature {temperature} is out of range: use 0 (greedy) to 2",
                             "temperature")
        if GREEDY_BELOW <= temperature < LOWEST_SAMPLED_TEMPERATURE - FLOAT32_SLACK:
            raise BadRequest("bad-sampling", f"temperature {temperature} is below {LOWEST_SAMPLED_TEMPERATURE}, the "
                             "lowest the engine samples at (it would raise it, and the tokens would not come from the "
                             f"distribution asked for): send 0 for greedy or {LOWEST_SAMPLED_TEMPERATURE} to 2",
                             "temperature")
        temperature = max(temperature, LOWEST_SAMPLED_TEMPERATURE) if temperature >= GREEDY_BELOW else temperature
        top_p = 1.0 if top_p is None else top_p
        if not (math.isfinite(top_p) and 0.0 < top_p <= 1.0):
            raise BadRequest("bad-sampling", f"top_p {top_p} is out of range: use a value in (0, 1]", "top_p")
        top_k = 0 if top_k in (None, -1) else top_k  # -1 and 0 both mean "disabled"
        if not 0 <= top_k <= INT32_MAX:
            raise BadRequest("bad-sampling", f"top_k {top_k} is out of range: use -1 or 0 (disabled) or a "
                             "positive count", "top_k")
        max_tokens = self.limits.default_max_tokens if max_tokens is None else max_tokens
        if not 1 <= max_tokens <= self.max_model_len:
            raise BadRequest("bad-sampling", f"max_tokens {max_tokens} is out of range: use 1 to "
                             f"{self.max_model_len}", "max_tokens")
        seed = 0 if seed is None else seed
        if not INT64_MIN <= seed <= INT64_MAX:
            raise BadRequest("bad-sampling", f"seed {seed} does not fit a signed 64-bit integer", "seed")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if len(stops) > MAX_STOP_SEQUENCES or not all(0 < len(s) <= MAX_STOP_CHARS for s in stops):
            raise BadRequest("bad-sampling", f"stop takes up to {MAX_STOP_SEQUENCES} sequences of 1 to "
                             f"{MAX_STOP_CHARS} characters", "stop")
        if temperature < GREEDY_BELOW:
            temperature, top_p, top_k = 0.0, 1.0, 0
        return Sampling(temperature=float(temperature), top_p=float(top_p), top_k=top_k, max_tokens=max_tokens,
                        seed=seed, stop=stops)

    def check_prompt(self, prompt: str | None, prompt_token_ids: Sequence[int] | None) -> None:
        """Refuse a prompt that is missing, doubled or too long, before any work is spent on it."""
        if prompt and prompt_token_ids:
            raise BadRequest("bad-prompt", "send prompt text or prompt_token_ids, not both", "prompt")
        if not prompt and not prompt_token_ids:
            raise BadRequest("empty-prompt", "the prompt is empty: send prompt text or prompt_token_ids", "prompt")
        if prompt and len(prompt) > self.limits.max_prompt_chars:
            raise BadRequest("too-long", f"the prompt has {len(prompt)} characters, more than the "
                             f"{self.limits.max_prompt_chars} served here: shorten it", "prompt")
        if prompt_token_ids and len(prompt_token_ids) >= self.max_model_len:
            raise BadRequest("too-long", f"the prompt has {len(prompt_token_ids)} tokens; the model length is "
                             f"{self.max_model_len}: shorten it", "prompt")

    async def begin(self, caller: Caller, prompt: str | None, prompt_token_ids: Sequence[int] | None,
                    sampling: Sampling, forced_text: str = "") -> Call:
        """Lease the version that will serve this request and tokenize the prompt with its tokenizer
        (a long prompt on a worker thread: a megabyte prompt must not stall the loop that answers health checks).
        forced_text: an opening the reply is made to start with (a forced tool call), tokenized on its own and
        appended to the prompt's ids, so the recorded prompt is exactly what the engine continued."""
        self.check_prompt(prompt, prompt_token_ids)
        slot = self.router.acquire(caller.tenant_id or self.default_tenant, caller.session_id)
        try:
            ids = list(prompt_token_ids or [])
            if not ids and len(prompt) <= INLINE_TOKENIZE_CHARS:
                ids = tokens.encode(slot.tokenizer, prompt)  # microseconds, GIL held: cheaper than a thread hop
            elif not ids:
                ids = await asyncio.to_thread(tokens.encode, slot.tokenizer, prompt, True)  # GIL released
            if forced_text:  # no special tokens: it continues the prompt, it does not start a sequence
                ids += slot.tokenizer(forced_text, add_special_tokens=False)["input_ids"]
            vocab = slot.vocab_size
            if ids and (min(ids) < 0 or max(ids) >= vocab):
                raise BadRequest("bad-token-id", f"prompt_token_ids must lie in [0, {vocab}) for this policy",
                                 "prompt")
            if not ids:
                raise BadRequest("empty-prompt", "the prompt has no tokens: send some text", "prompt")
            if len(ids) + sampling.max_tokens > self.max_model_len:
                raise BadRequest("too-long", f"prompt ({len(ids)} tokens) + max_tokens ({sampling.max_tokens}) "
                                 f"exceeds the model length {self.max_model_len}: shorten the prompt or max_tokens",
                                 "max_tokens")
        except BaseException:
            slot.release(True, 0.0)
            raise
        request_id = caller.request_id or f"req-{secrets.token_hex(16)}"  # uuid4().hex's shape, a third the cost
        if not caller.session_id:  # no session named: the call is a session of its own, named by its id
            caller = dataclasses.replace(caller, session_id=request_id)
        self.metrics.of_version(slot.version).in_flight.inc()
        return Call(self, slot, caller, sampling, ids, request_id, forced_text=forced_text)

    def finish(self, call: Call, ok: bool) -> None:
        """Account for a finished (or failed, or abandoned) call and record what it generated."""
        latency = time.time() - call.started
        call.slot.release(ok, latency)
        metrics = self.metrics.of_version(call.slot.version)
        metrics.in_flight.dec()
        metrics.requests(call.caller.api, "ok" if ok else "error").inc()
        metrics.latency.observe(latency)
        metrics.prompt_tokens.inc(len(call.prompt_token_ids))
        metrics.completion_tokens.inc(len(call.token_ids))
        if call.token_ids and self.recorder is not None and self.opt_out.excludes(call.caller.tenant_id,
                                                                                  call.caller.user_id):
            self.metrics.records.labels("opt_out").inc()  # ingest.opt_out_*: served, never recorded
        elif call.token_ids and self.recorder is not None:  # built, redacted and serialized on the recording thread
            finished_ms = int(time.time() * 1000)
            self.recorder.record_later(lambda: self.redacted_model_call(call, ok, finished_ms), finished_ms,
                                       call.caller.user_id)  # linked to the session as its pseudonym, off the path

    def redacted_model_call(self, call: Call, ok: bool, finished_ms: int) -> model_call_pb2.ModelCall:
        record = self.model_call(call, ok, finished_ms)
        redactor = self.redactor(record.tenant_id)
        if redactor is not None:  # ids and stop strings are the only text a ModelCall carries
            redactor.redact_message(record)
        return record

    def redactor(self, tenant: str) -> Redactor | None:
        """The redactor of a tenant (its overrides applied), or None when redaction is off. An id that holds
        personal data gets the tenant's keyed pseudonym from the recorder's key store (what it redacts is
        what the recorder writes), as capture gives it; without one, a key of this process."""
        if self._redaction is None or not self._redaction.enabled:
            return None
        if tenant not in self._redactors:
            from functools import partial

            from liverl.redaction import Redactor

            subjects = getattr(self.recorder, "subjects", None)
            pseudonym = partial(subjects.pseudonyms.redacted_id, tenant) if subjects is not None else None
            self._redactors[tenant] = Redactor(self._redaction, tenant, pseudonym)
        return self._redactors[tenant]

    def model_call(self, call: Call, ok: bool, finish_ms: int | None = None) -> model_call_pb2.ModelCall:
        caller, s = call.caller, call.sampling
        finish_ms = int(time.time() * 1000) if finish_ms is None else finish_ms
        return model_call_pb2.ModelCall(
            event_id=uuid.uuid4().hex,
            request_id=call.request_id,
            session_id=caller.session_id,
            tenant_id=caller.tenant_id or self.default_tenant,
            schema_version=names.EVENT_SCHEMA_VERSION,
            agent_role=caller.agent_role,
            agent_id=caller.agent_id or "main",
            policy_version=call.slot.version,
            adapter_name=call.slot.adapter_name,
            base_version=call.slot.adapter.base_version if call.slot.adapter is not None else "",
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


def _process_user_pseudonym(key: bytes) -> Callable[[str, str], str]:
    """A user pseudonym under a key only this process holds (a Completions built without a key store)."""
    from liverl.privacy.pseudonyms import keyed_digest

    return lambda tenant, user: f"u-{keyed_digest(key, 'u', f'{tenant}/{user}')}"
