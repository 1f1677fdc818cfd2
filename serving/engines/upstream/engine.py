"""The upstream engine: the team's own vLLM servers generate, liverl serves the APIs and records every call.

liverl keeps owning text: it renders chat templates and tokenizes with the policy's tokenizer, as with its own
engines, and sends each generation to a server as prompt token ids (POST /v1/completions, "return_token_ids",
"logprobs": 0). What comes back is recorded as it came: the sampled ids and their logprobs.

A call is recorded exactly only when the server proves it ran the prompt sent (prompt_token_ids equal to it),
returns an id and a logprob for every sampled token, and its logprobs are of the distribution sampled from
(--logprobs-mode processed_logprobs, probed at start, or raw logprobs of a call whose sampling changes nothing:
greedy, or temperature 1 untruncated). Any other call is still served, but its logprobs are recorded as NaN:
unknown, never guessed. A ModelCall with a NaN logprob is unscorable as a whole (docs/upstream.md).

start() refuses (naming the server) unless every server answers, returns token ids and logprobs, and reproduces
the version's weight probe: the fleet serves one base, deployed by its owners, so a full-weights version that is
not what it serves can never take traffic here (there is no update_weights: the swap falls back to a second
engine, whose start() refuses it). Adapter versions of that base go through the fleet (load_adapter = push).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx

from liverl.config.serving import ServingConfig
from liverl.contracts.weight_probe import has_probe
from serving.engines.engine import Adapter, Delta, Sampling
from serving.engines.upstream import wire
from serving.metrics import ServingMetrics
from serving.swap.weight_check import WeightProbeMismatch, tolerance, verify_weights

log = logging.getLogger("liverl.serving.upstream")

CHECK_IDS = list(range(1, 17))  # a fixed prompt every vocabulary holds: the mode probe, and the cross-server check


class UpstreamEngine:
    name = "upstream"

    def __init__(self, policy_dir: Path, serving_config: ServingConfig, fleet=None):
        """fleet: what routes requests and pushes adapters (an UpstreamFleet, serving/engines/upstream/fleet.py, or
        anything with its pick/report_failure/push/unload/has); None: an UpstreamFleet over serving.upstream.urls."""
        self.policy_dir = Path(policy_dir)
        self._config = serving_config
        self._upstream = serving_config.upstream
        self._fleet = fleet
        self._owns_fleet = fleet is None
        self._client: httpx.AsyncClient | None = None  # probes, weight checks: a few requests at start and swap
        self._streams: aiohttp.ClientSession | None = None  # every completion (wire.complete says why aiohttp)
        self.models: dict[str, str] = {}  # url -> the base model's name there
        self.modes: dict[str, wire.LogprobsMode] = {}  # url -> its logprobs mode, probed at start
        self._all_down_since: float | None = None
        self._tokenizer = None  # loaded only if a server ever answers without token ids

    # ---- life ----

    async def start(self) -> None:
        """Check every server (up, token ids and logprobs, logprobs mode, the base weights), then start the fleet."""
        u = self._upstream
        api_key = read_api_key(u.api_key_file)
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=auth,
            timeout=httpx.Timeout(u.timeout_s, connect=u.connect_timeout_s),
            limits=httpx.Limits(max_connections=u.max_connections, max_keepalive_connections=u.max_connections,
                                keepalive_expiry=u.idle_connection_s))
        self._streams = aiohttp.ClientSession(
            headers=auth,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=u.connect_timeout_s, sock_read=u.timeout_s),
            connector=aiohttp.TCPConnector(limit=u.max_connections, keepalive_timeout=u.idle_connection_s))
        try:
            for url in u.urls:
                await self._check_server(url)
            await self._check_same_weights()
            if self._fleet is None:
                self._fleet = make_fleet(self._config, api_key)
            await self._fleet.start()
        except BaseException:
            await self.shutdown()
            raise

    async def _check_server(self, url: str) -> None:
        try:
            model = self._upstream.served_model or await wire.served_base_model(self._client, url)
            mode = await wire.logprobs_mode(self._client, url, model, CHECK_IDS)
        except httpx.TransportError as error:
            raise RuntimeError(f"upstream server {url} is not reachable ({type(error).__name__}: {error}): start "
                               "it with the flags in docs/upstream.md, or leave it out of serving.upstream.urls"
                               ) from error
        self.models[url], self.modes[url] = model, mode
        if mode == "raw":
            message = (f"upstream server {url} returns raw logprobs (it runs without --logprobs-mode "
                       "processed_logprobs): its calls sampled with a temperature other than 0 and 1, or with top_p "
                       "or top_k, are served but recorded unscorable. Restart it with that flag")
            if self._upstream.require_processed_logprobs:
                raise RuntimeError(message + " (serving.upstream.require_processed_logprobs is set)")
            log.warning(message)
        scorer = _BaseModelScorer(self._client, url, model)
        try:
            worst = await verify_weights(scorer, self.policy_dir, f"{self.policy_dir.name}@{url}", self._config,
                                         ServingMetrics(), say=log.info)
        except WeightProbeMismatch as error:
            raise RuntimeError(f"upstream server {url} does not serve the weights of {self.policy_dir}: {error}. The "
                               "fleet serves one base model, deployed by its owners; liverl puts only adapter versions "
                               "of that base into service. Serve the version the fleet runs, or redeploy the fleet "
                               "with these weights") from error
        log.info("upstream server %s: model %s, %s logprobs, weight probe %s", url, model, mode,
                 "absent" if worst is None else f"matched (max |difference| {worst:.3g})")

    async def _check_same_weights(self) -> None:
        """Without a weight probe in the folder, at least every server must agree with the first one."""
        urls = self._upstream.urls
        if has_probe(self.policy_dir) or len(urls) < 2:
            return
        allowed, _ = tolerance(self._config, self._config.dtype)
        first = await wire.prompt_logprobs(self._client, urls[0], self.models[urls[0]], CHECK_IDS)
        for url in urls[1:]:
            other = await wire.prompt_logprobs(self._client, url, self.models[url], CHECK_IDS)
            worst = max(abs(a - b) for a, b in zip(first, other))
            if not worst <= allowed:
                raise RuntimeError(f"upstream servers {urls[0]} and {url} serve different weights (max |logprob "
                                   f"difference| {worst:.3g} > {allowed:.3g}): every server must serve the same base")

    async def shutdown(self) -> None:
        if self._fleet is not None and self._owns_fleet:
            fleet, self._fleet = self._fleet, None
            await fleet.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
        if self._streams is not None:
            streams, self._streams = self._streams, None
            await streams.close()

    def failure(self) -> str | None:
        """None while some server can serve; once none could for serving.upstream.dead_after_s, why."""
        if self._fleet is None or self._servers_up() > 0:
            self._all_down_since = None
            return None
        now = time.monotonic()
        self._all_down_since = self._all_down_since or now
        if now - self._all_down_since < self._upstream.dead_after_s:
            return None
        return (f"no upstream vLLM server of {self._upstream.urls} has been able to serve for "
                f"{now - self._all_down_since:.0f} s")

    def describe(self) -> dict:
        """What /health shows of the fleet: how many servers can serve now, and each server's base model and
        logprobs mode (probed at start) and, where the fleet tracks it, whether it takes requests and why not."""
        states = {server.url: server for server in getattr(self._fleet, "servers", [])}
        servers = {}
        for url, model in self.models.items():
            servers[url] = {"model": model, "logprobs": self.modes[url]}
            if url in states:
                servers[url] |= {"up": states[url].healthy} | ({} if states[url].healthy else
                                                                {"reason": states[url].reason})
        return {"engine": self.name, "servers_up": self._servers_up() if self._fleet is not None else 0,
                "servers": servers}

    def _servers_up(self) -> int:
        if hasattr(self._fleet, "servers_up"):
            return self._fleet.servers_up()
        return sum(server.healthy for server in self._fleet.servers)

    # ---- generation ----

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                       final_only: bool = False, adapter: Adapter | None = None) -> AsyncIterator[Delta]:
        """Stream the completion from a server the fleet picks, logprobs NaN (unknown) from the moment the call
        stops being recordable exactly (the module docstring says when)."""
        url, first, pieces = await self._open(prompt_token_ids, sampling, request_id, final_only, adapter)
        try:
            exact = wire.exact_under(self.modes.get(url, "raw"), sampling)
            if first.prompt_token_ids != list(prompt_token_ids):
                exact = False
                log.warning("upstream server %s ran request %s on prompt ids other than those sent (%s): recorded "
                            "unscorable", url, request_id, "none returned" if first.prompt_token_ids is None else
                            f"{len(first.prompt_token_ids)} ids for {len(prompt_token_ids)}")
            finished = False
            piece: wire.Piece | None = first
            while piece is not None:
                if exact and not piece.exact:
                    log.warning("upstream server %s sent request %s's tokens without ids or logprobs: recorded "
                                "unscorable", url, request_id)
                    exact = False
                ids = piece.token_ids if piece.token_ids or not piece.text else await self._encode(piece.text)
                if ids or piece.finish_reason:
                    finished = piece.finish_reason is not None
                    yield Delta(ids, piece.logprobs if exact else [wire.UNKNOWN] * len(ids),
                                _finish(piece.finish_reason) if finished else None)
                piece = await anext(pieces, None)
        finally:
            await pieces.aclose()  # closes the connection: vLLM aborts a request whose client went away
        if not finished:
            yield Delta([], [], "stop")  # the server ended the stream without a reason: its tokens stand as sent

    async def _open(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str, final_only: bool,
                    adapter: Adapter | None) -> tuple[str, wire.Piece, AsyncIterator[wire.Piece]]:
        """(server, its first piece, the rest): a server that cannot be reached, answers 5xx or aborts the request
        before its first piece is reported to the fleet and the next one is tried; a failure after it fails the
        request (its tokens may already be with the client), never an empty or cut reply passed off as finished."""
        self._require_started()
        streams, fleet = self._streams, self._fleet  # this request's: a shutdown meanwhile drops the engine's
        adapter_name = adapter.name if adapter is not None else None
        tried: list[str] = []
        while (url := fleet.pick(adapter_name)) not in tried:  # each server once: pick skips failed ones
            tried.append(url)
            body = wire.completion_body(adapter_name or self._model_at(url), prompt_token_ids, sampling, not final_only)
            pieces = wire.complete(streams, url, body)
            try:
                first = await anext(pieces)
            except (*wire.TRANSPORT_ERRORS, wire.ServerRefused, wire.ServerAborted) as error:
                if isinstance(error, wire.ServerRefused) and error.status < 500:
                    raise  # the request itself was refused: another server would refuse it too
                fleet.report_failure(url, f"{type(error).__name__}: {error}")
                log.warning("upstream server %s failed request %s before its first token (%s): trying another",
                            url, request_id, error)
                continue
            except BaseException:  # cancelled while waiting: close the connection now
                await pieces.aclose()
                raise
            if hasattr(fleet, "report_success"):
                fleet.report_success(url)
            return url, first, pieces
        raise RuntimeError(f"no upstream server could take request {request_id} (tried {', '.join(tried)})")

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str,
                              adapter: Adapter | None = None) -> list[float]:
        """Raw prompt logprobs from a server the fleet picks (the version's smoke test compares them with its
        weight probe: serving/swap/weight_check.py)."""
        client = self._require_started()
        adapter_name = adapter.name if adapter is not None else None
        url = self._fleet.pick(adapter_name)
        return await wire.prompt_logprobs(client, url, adapter_name or self._model_at(url), prompt_token_ids)

    # ---- adapters: the fleet's ----

    async def load_adapter(self, adapter: Adapter) -> dict:
        """Load the adapter into every server (the fleet's push: one server at a time, each weight-probed; nothing
        stays loaded when it raises)."""
        self._require_started()
        return await self._fleet.push(adapter)

    async def unload_adapter(self, adapter: Adapter) -> None:
        if self._fleet is not None:
            await self._fleet.unload(adapter)

    def has_adapter(self, adapter: Adapter) -> bool:
        return self._fleet is not None and self._fleet.has(adapter)

    # ---- helpers ----

    def _model_at(self, url: str) -> str:
        """The base model's name on a server (a server the fleet knows and start() did not: the configured one)."""
        return self.models.get(url) or self._upstream.served_model or next(iter(self.models.values()))

    def _require_started(self) -> httpx.AsyncClient:
        if self._client is None or self._streams is None or self._fleet is None:
            raise RuntimeError("UpstreamEngine used before start(): await engine.start() first")
        return self._client

    async def _encode(self, text: str) -> list[int]:
        """Ids of text a server sent without its ids: what the client got, for the record (unscorable anyway)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self.policy_dir)
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])


class _BaseModelScorer:
    """weight_check's Scorer over one server's base model."""

    def __init__(self, client: httpx.AsyncClient, url: str, model: str):
        self._client, self._url, self._model = client, url, model

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str) -> list[float]:
        return await wire.prompt_logprobs(self._client, self._url, self._model, prompt_token_ids)


def read_api_key(path: Path | None) -> str | None:
    """The servers' bearer key from serving.upstream.api_key_file (None: the servers are open)."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise FileNotFoundError(f"serving.upstream.api_key_file {path} does not exist: write the servers' --api-key "
                                "there, or unset it for servers that take no key")
    key = Path(path).read_text().strip()
    if not key:
        raise ValueError(f"serving.upstream.api_key_file {path} is empty: write the servers' --api-key there")
    return key


def make_fleet(config: ServingConfig, api_key: str | None):
    """The fleet over serving.upstream.urls, naming the base model serving.upstream.served_model says (imported here,
    when an upstream engine starts)."""
    from serving.engines.upstream.fleet import UpstreamFleet

    u = config.upstream
    return UpstreamFleet(u.urls, api_key, u.timeout_s, reconcile_interval_s=u.reconcile_interval_s,
                         serving_config=config, served_model=u.served_model or None, say=log.info)


def _finish(reason: str | None) -> str:
    return reason or "stop"
