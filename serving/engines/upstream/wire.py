"""vLLM's OpenAI-compatible HTTP API as the upstream engine uses it: completion requests of prompt token ids, their
(streamed) answers turned into token ids and logprobs, the raw prompt logprobs of the weight probe, and the probe of
a server's logprobs mode.

What a server must return for a call to be recorded exactly: the prompt ids it ran (`prompt_token_ids`, equal to
those sent), the sampled ids (`token_ids`, from return_token_ids) and one logprob per sampled id
(`logprobs.token_logprobs`, from "logprobs": 0) of the distribution it sampled from. Anything else is served and
marked unknown: NaN logprobs (UNKNOWN), never a value guessed from text.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
import httpx
import orjson

from serving.engines.engine import Sampling

UNKNOWN = math.nan  # the logprob of a token the server sampled from a distribution we cannot know exactly
LogprobsMode = Literal["processed", "raw"]
MODE_PROBE_TEMPERATURES = (1.0, 0.5)  # processed logprobs change between them; raw ones do not
MODE_PROBE_TOP = 5
MODE_EQUAL = 1e-6  # raw logprobs of one prompt are bit-identical across temperatures; processed differ by far more
JSON = {"Content-Type": "application/json"}
# what a server that cannot be reached (or stops answering) raises: httpx for the probes, aiohttp for completions
TRANSPORT_ERRORS = (httpx.TransportError, aiohttp.ClientError, asyncio.TimeoutError)


class ServerRefused(RuntimeError):
    """The server answered an error status before any token (the request may go to another server when 5xx)."""

    def __init__(self, url: str, status: int, body: str):
        super().__init__(f"vLLM server {url} answered {status}: {body[:300]}")
        self.status = status


class ServerAborted(RuntimeError):
    """The server ended the request itself (HTTP 200): vLLM aborts the requests it holds when it shuts down, or when
    it is paused with mode "abort" (POST /pause, as RL trainers pause a fleet for a weight update), and answers them
    with finish_reason "abort", or, streamed and before the first token, with a stream of nothing but [DONE].
    Nothing was wrong with the request: another server may take it."""

    def __init__(self, url: str):
        super().__init__(f"vLLM server {url} aborted the request (finish_reason \"abort\": shutting down or paused)")


@dataclass
class Piece:
    """One chunk of a server's answer: the new sampled ids and their logprobs (UNKNOWN where missing)."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None  # what the server says it ran (first chunk only)
    text: str = ""  # the server's decoded text: only used when it sent no token ids
    exact: bool = True  # False: ids or logprobs were missing or misaligned in this chunk


def completion_body(model: str, prompt_token_ids: list[int], sampling: Sampling, stream: bool) -> dict:
    """The /v1/completions request of one generation, sampling as the Sampling says (vLLM's own defaults for
    what it leaves out: top_k disabled, unseeded, no stop strings)."""
    body = {"model": model, "prompt": list(prompt_token_ids), "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "logprobs": 0,
            "return_token_ids": True, "stream": stream}
    if sampling.top_k > 0:
        body["top_k"] = sampling.top_k
    if sampling.seed:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    return body


def parse_choice(choice: dict) -> Piece:
    """A response's (or a stream chunk's) choices[0] as a Piece."""
    ids = choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    piece = Piece(finish_reason=choice.get("finish_reason"), prompt_token_ids=choice.get("prompt_token_ids"),
                  text=choice.get("text") or "")
    if ids is None:
        piece.exact = False
        return piece
    piece.token_ids = [int(t) for t in ids]
    if logprobs is None or len(logprobs) != len(ids) or any(lp is None for lp in logprobs):
        piece.exact = not piece.token_ids  # an empty final chunk carries no logprobs and needs none
        piece.logprobs = [UNKNOWN] * len(ids)
    else:
        piece.logprobs = [float(lp) for lp in logprobs]
    return piece


async def complete(session: aiohttp.ClientSession, url: str, body: dict) -> AsyncIterator[Piece]:
    """POST body to the server's /v1/completions: its pieces, one per stream chunk (or one when not streamed).
    ServerRefused on an error status, ServerAborted when the server aborts the request, one of TRANSPORT_ERRORS on
    transport failures. Completions go through aiohttp, not httpx: a streamed completion of a few tokens cost
    liverl's event loop 2-4 ms of CPU through httpx and about 0.3 ms through aiohttp (docs/upstream.md, "Measured"),
    and that loop serves every request. The stream is read to its end, past "[DONE]", so that the connection goes
    back to the pool; leaving early (aclose) closes it, which vLLM takes as the client gone and aborts the request."""
    async with session.post(f"{url}/v1/completions", data=orjson.dumps(body), headers=JSON) as response:
        if response.status != 200:
            raise ServerRefused(url, response.status, (await response.read()).decode(errors="replace"))
        if not body.get("stream"):
            yield _unless_aborted(url, parse_choice(orjson.loads(await response.read())["choices"][0]))
            return
        pieces = 0
        async for line in response.content:  # line by line, whatever their length
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue  # the body ends right after it
            chunk = orjson.loads(data)
            if "error" in chunk:  # vLLM reports a failure mid-stream as an error event
                raise RuntimeError(f"vLLM server {url} failed mid-stream: {chunk['error']}")
            if chunk.get("choices"):
                pieces += 1
                yield _unless_aborted(url, parse_choice(chunk["choices"][0]))
        if not pieces:  # vLLM sends only [DONE] for a request it aborted before its first token
            raise ServerAborted(url)


def _unless_aborted(url: str, piece: Piece) -> Piece:
    if piece.finish_reason == "abort":
        raise ServerAborted(url)
    return piece


async def prompt_logprobs(client: httpx.AsyncClient, url: str, model: str, prompt_token_ids: list[int]) -> list[float]:
    """The raw logprob of each prompt token after the first, given the ones before (vLLM's prompt_logprobs):
    what the weight probe compares (serving/swap/weight_check.py)."""
    body = {"model": model, "prompt": list(prompt_token_ids), "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0}
    response = await client.post(f"{url}/v1/completions", json=body)
    if response.status_code != 200:
        raise ServerRefused(url, response.status_code, response.text)
    scored = response.json()["choices"][0]["prompt_logprobs"][1:]  # the first token has no context: null
    return [_entry_logprob(entry, token) for entry, token in zip(scored, prompt_token_ids[1:])]


def _entry_logprob(entry: dict, token: int) -> float:
    """A prompt_logprobs entry's logprob of token: keyed by the id, or "token_id:<id>" under
    --return-tokens-as-token-ids."""
    value = entry.get(str(token)) or entry.get(f"token_id:{token}")
    return float(value["logprob"]) if value is not None else math.inf


async def logprobs_mode(client: httpx.AsyncClient, url: str, model: str, prompt_token_ids: list[int]) -> LogprobsMode:
    """Whether the server's sampled logprobs are "processed" (of the distribution after temperature, top-k and
    top-p, what liverl records) or "raw" (log_softmax of the logits). The same one-token request at two
    temperatures: processed top logprobs move with the temperature, raw ones do not. RuntimeError when the server
    does not return token ids and logprobs at all (it cannot be captured)."""
    tops = []
    for temperature in MODE_PROBE_TEMPERATURES:
        body = {"model": model, "prompt": list(prompt_token_ids), "max_tokens": 1, "temperature": temperature,
                "logprobs": MODE_PROBE_TOP, "return_token_ids": True, "seed": 1}
        response = await client.post(f"{url}/v1/completions", json=body)
        if response.status_code != 200:
            raise ServerRefused(url, response.status_code, response.text)
        choice = response.json()["choices"][0]
        top = ((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]
        if choice.get("token_ids") is None or not top:
            raise RuntimeError(f"vLLM server {url} returned no token ids or no logprobs for a completion of token "
                               "ids with return_token_ids and logprobs: it cannot be recorded exactly. Run vLLM "
                               ">= 0.10.2 (return_token_ids) with the flags in docs/upstream.md")
        tops.append(top)
    shared = set(tops[0]) & set(tops[1])
    if not shared:
        raise RuntimeError(f"vLLM server {url}: its logprobs mode could not be told (no token in both probes' top "
                           f"{MODE_PROBE_TOP}); start it with --logprobs-mode processed_logprobs")
    moved = max(abs(tops[0][t] - tops[1][t]) for t in shared)
    return "processed" if moved > MODE_EQUAL else "raw"


def exact_under(mode: LogprobsMode, sampling: Sampling) -> bool:
    """Whether a server in this mode returns the processed logprobs of a call sampled so. Raw equals processed when
    the sampler changes nothing: greedy (vLLM records the untruncated temperature-1 log-softmax then, as
    trainer/gate/scoring.py says) or temperature 1 with neither top-p nor top-k."""
    if mode == "processed":
        return True
    return sampling.temperature == 0.0 or (sampling.temperature == 1.0 and sampling.top_p >= 1.0
                                           and sampling.top_k <= 0)


async def served_base_model(client: httpx.AsyncClient, url: str) -> str:
    """The base model a server serves: the first /v1/models entry that is not a LoRA adapter (no parent)."""
    response = await client.get(f"{url}/v1/models")
    if response.status_code != 200:
        raise ServerRefused(url, response.status_code, response.text)
    bases = [m["id"] for m in response.json().get("data", []) if not m.get("parent")]
    if not bases:
        raise RuntimeError(f"vLLM server {url} lists no base model in /v1/models; set serving.upstream.served_model")
    return bases[0]
