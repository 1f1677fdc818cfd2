"""The upstream fleet: a team's own OpenAI-compatible vLLM servers, and the adapter versions liverl pushes into them.

liverl does not start these servers; it loads its LoRA versions into them through vLLM's runtime endpoints
(`POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter`: the servers run with
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) and routes each request to a server that holds the version it names.

    push(adapter)   one server at a time: load under adapter.name, then run the version's weight probe on that
                    server (serving/swap/weight_check.py: prompt logprobs under the adapter against the trainer's);
                    any failure unloads it from every server it reached and raises, so the fleet serves what it
                    served before. Only once every server passed does pick() route to it.
    reconcile()     every `reconcile_interval_s`: a server that failed a request is out of pick() until it answers
                    again; one that restarted (its /v1/models lacks adapters it should hold) gets them loaded and
                    probed again first. Unloads a down server missed are retried.

State is only in this process: after a liverl restart the engine pushes again what it routes to (an adapter still
loaded from before is unloaded and loaded from its folder afresh, then probed).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from liverl.config.serving import ServingConfig
from serving.engines.engine import Adapter
from serving.metrics import ServingMetrics
from serving.swap.weight_check import verify_weights

log = logging.getLogger("liverl.serving.upstream")

HEALTH_TIMEOUT_S = 5.0  # a server that does not answer /health this fast is out of pick() until it does


class UpstreamUnavailable(RuntimeError):
    """A server did not answer (connection refused, timeout, a failed health check): it is out of pick() until
    reconcile sees it healthy and complete again."""


class NoUpstreamServer(RuntimeError):
    """No healthy server holds the adapter a request names."""


class PushFailed(RuntimeError):
    """An adapter could not be loaded or did not reproduce its weight probe on some server: it was unloaded from
    every server it reached, and the fleet serves what it served before."""


@dataclass
class UpstreamServer:
    """One server of the fleet, as the fleet last saw it."""

    url: str  # base URL, e.g. http://10.0.0.5:8000 (no /v1)
    healthy: bool = False  # pick() may route here: it answers and holds every adapter it should, each probed
    reason: str = "not checked yet"  # why it is not healthy
    ready: set[str] = field(default_factory=set)  # adapter names loaded and probed in the server's current life
    stale: set[str] = field(default_factory=set)  # names to unload once it answers again (an unload it missed)


class UpstreamFleet:
    """The servers liverl fronts. Every method that changes what a server holds runs under one lock (push, unload,
    reconcile), so a roll and a recovery never interleave on a server."""

    def __init__(self, urls: list[str], api_key: str | None, timeout_s: float,
                 reconcile_interval_s: float = 5.0, serving_config: ServingConfig | None = None,
                 metrics: ServingMetrics | None = None, server_path: Callable[[Path], str] | None = None,
                 served_model: str | None = None, say: Callable[[str], None] = print):
        """serving_config: its dtype and weight-probe settings set the probe's tolerance (set dtype to the fleet's:
        "float32", or "bfloat16"/"float16"/"auto" for the half-precision tolerance), and its
        upstream.idle_connection_s how long an idle connection is kept for reuse. server_path: where an adapter
        folder is on the servers' filesystem (default: the same path; the folders must be readable there).
        served_model: the servers' base model name (default: the one base model each server's /v1/models lists)."""
        if not urls:
            raise ValueError("UpstreamFleet needs at least one server URL (e.g. http://10.0.0.5:8000)")
        self._servers = [UpstreamServer(url.rstrip("/").removesuffix("/v1")) for url in urls]
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._interval_s = reconcile_interval_s
        self._config = serving_config or ServingConfig()
        self._metrics = metrics or ServingMetrics()
        self._server_path = server_path or str
        self._say = say
        self._served_model = served_model
        self._wanted: dict[str, Adapter] = {}  # name -> adapter every server should hold (pushed, not unloaded)
        self._turn = itertools.count()
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        self._reconciler: asyncio.Task | None = None
        self.base_model: str | None = None  # the servers' base model name (a request without adapter names it)

    @property
    def servers(self) -> list[UpstreamServer]:
        return list(self._servers)

    # ---- life ----

    async def start(self) -> None:
        """Check every server answers and serves the same base model; then keep them reconciled in the background."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._client = httpx.AsyncClient(timeout=self._timeout_s, headers=headers,
                                         limits=httpx.Limits(keepalive_expiry=self._config.upstream.idle_connection_s))
        bases = {}
        for server in self._servers:
            try:
                await self._check_health(server)
                cards = await self._models(server)
            except (UpstreamUnavailable, httpx.HTTPStatusError) as error:
                await self.close()
                raise UpstreamUnavailable(f"upstream server {server.url} is not usable ({error}): start it (see "
                                          "docs/upstream.md for its flags) or leave it out of the list"
                                          ) from error
            bases[server.url] = sorted(name for name, card in cards.items() if card.get("parent") is None
                                       and self._served_model in (None, name))
        if len({tuple(names) for names in bases.values()}) != 1 or len(next(iter(bases.values()))) != 1:
            await self.close()
            raise ValueError(f"the upstream servers must all serve one and the same base model"
                             f"{f' {self._served_model}' if self._served_model else ''}; they serve {bases}")
        self.base_model = next(iter(bases.values()))[0]
        for server in self._servers:
            server.healthy, server.reason = True, ""
        self._reconciler = asyncio.create_task(self._reconcile_forever(), name="upstream-reconcile")

    async def close(self) -> None:
        if self._reconciler is not None:
            self._reconciler.cancel()
            try:
                await self._reconciler
            except asyncio.CancelledError:
                pass
            self._reconciler = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ---- routing ----

    def pick(self, adapter_name: str | None) -> str:
        """The URL of a healthy server holding the adapter (None: the base), in turn."""
        candidates = [s for s in self._servers if s.healthy and (adapter_name is None or adapter_name in s.ready)]
        if not candidates:
            states = "; ".join(f"{s.url}: " + (("ready" if adapter_name is None or adapter_name in s.ready
                                                 else "does not hold it") if s.healthy else f"out ({s.reason})")
                               for s in self._servers)
            raise NoUpstreamServer(f"no healthy upstream server holds {adapter_name or 'the base model'} ({states}): "
                                   "push the adapter first, or bring a server back")
        return candidates[next(self._turn) % len(candidates)].url

    def model_for(self, adapter_name: str | None) -> str:
        """The "model" a request names: the adapter's name, or the servers' base model."""
        return adapter_name or self._require_base()

    def has(self, adapter: Adapter) -> bool:
        """Loaded and probed on every healthy server (and there is one)."""
        healthy = [s for s in self._servers if s.healthy]
        return bool(healthy) and all(adapter.name in s.ready for s in healthy)

    def report_failure(self, url: str, reason: str) -> None:
        """A request the engine sent to url failed at the transport: out of pick() until reconcile brings it back."""
        for server in self._servers:
            if server.url == url:
                self._mark_down(server, reason)

    def report_success(self, url: str) -> None:
        """A request url answered. Nothing to do: a server comes back into pick() only through reconcile, which
        first checks it holds (and reproduces) every adapter it should."""

    def servers_up(self) -> int:
        return sum(server.healthy for server in self._servers)

    # ---- what the servers hold ----

    async def push(self, adapter: Adapter) -> dict:
        """Load the adapter into every healthy server, one at a time, each load followed by its weight probe on that
        server; route to it only once all passed. A server out at the time gets it from reconcile before it takes
        traffic again. Returns {"servers": {url: {"at_s", "load_s", "probe_s"}}, "order": [...], "skipped": [...],
        "seconds"}: at_s is when that server's load began, from the call."""
        async with self._lock:
            if adapter.name in self._wanted and self.has(adapter):
                return {"servers": {}, "order": [], "skipped": [], "seconds": 0.0, "already_loaded": True}
            if not any(s.healthy for s in self._servers):
                self.pick(None)  # raises NoUpstreamServer with every server's state
            targets = [s for s in self._servers if s.healthy and adapter.name not in s.ready]
            started = time.perf_counter()
            timings, reached = {}, []
            try:
                for server in targets:
                    reached.append(server)
                    at_s = time.perf_counter() - started  # this server's load starts only once the previous passed
                    timings[server.url] = {"at_s": at_s, **await self._load_and_probe(server, adapter)}
                    timing = timings[server.url]
                    self._say(f"serving upstream-loaded adapter={adapter.name} server={server.url} "
                              f"load_s={timing['load_s']:.3f} probe_s={timing['probe_s']:.3f}")
            except Exception as error:
                await self._unload_from(reached, adapter.name)
                self._say(f"serving upstream-push-refused adapter={adapter.name} "
                          f"unloaded_from={','.join(s.url for s in reached)}")
                raise PushFailed(f"adapter {adapter.name} (version {adapter.version}) was refused on "
                                 f"{reached[-1].url}: {error}. It was unloaded from "
                                 f"{', '.join(s.url for s in reached)}; the fleet serves what it served before"
                                 ) from error
            except asyncio.CancelledError:
                await self._unload_from(reached, adapter.name)
                raise
            self._wanted[adapter.name] = adapter
            for server in targets:
                server.ready.add(adapter.name)
            skipped = [s.url for s in self._servers if not s.healthy]
            return {"servers": timings, "order": [s.url for s in targets], "skipped": skipped,
                    "seconds": time.perf_counter() - started}

    async def unload(self, adapter: Adapter) -> None:
        """Unload from every server (a no-op where absent). The caller does so once no route uses the adapter; a
        server that is out now gets the unload from reconcile (or lost it by restarting)."""
        async with self._lock:
            self._wanted.pop(adapter.name, None)
            for server in self._servers:
                server.ready.discard(adapter.name)
            await self._unload_from(self._servers, adapter.name)

    async def reconcile(self) -> None:
        """Bring every server in line: out while it does not answer; once it does, the adapters it should hold loaded
        (a restart lost them) and all of them probed before pick() routes to it again."""
        async with self._lock:
            for server in self._servers:
                try:
                    await self._reconcile_server(server)
                except Exception as error:  # stays out of pick(); tried again at the next round
                    self._mark_down(server, f"{type(error).__name__}: {error}")

    # ---- one server ----

    async def _reconcile_server(self, server: UpstreamServer) -> None:
        await self._check_health(server)
        listed = await self._models(server)
        if self.base_model not in listed:
            raise RuntimeError(f"it serves {sorted(listed)}, not the fleet's base model {self.base_model}")
        for name in sorted(server.stale & listed.keys()):
            await self._unload_one(server, name)
        server.stale.clear()
        missing = [a for name, a in self._wanted.items() if name not in listed]
        if server.healthy and not missing:
            return
        if missing:  # restarted, or an adapter was unloaded behind our back: out of pick() until it holds them again
            self._mark_down(server, f"lacks {', '.join(a.name for a in missing)}: restoring")
        started = time.perf_counter()
        server.ready.clear()
        for adapter in list(self._wanted.values()):
            if adapter.name in listed:  # still there (a transient failure, no restart): prove it is still right
                await self._probe(server, adapter)
            else:
                await self._load_and_probe(server, adapter)
            server.ready.add(adapter.name)
        server.healthy, server.reason = True, ""
        self._say(f"serving upstream-back server={server.url} restored={','.join(a.name for a in missing) or '-'} "
                  f"probed={len(self._wanted)} seconds={time.perf_counter() - started:.3f}")

    async def _load_and_probe(self, server: UpstreamServer, adapter: Adapter) -> dict:
        if adapter.name in await self._models(server):  # left from an earlier liverl life: load the folder afresh
            await self._unload_one(server, adapter.name)
        started = time.perf_counter()
        response = await self._call(server, "POST", "/v1/load_lora_adapter",
                                    {"lora_name": adapter.name, "lora_path": self._server_path(adapter.path)})
        if response.status_code != 200:
            hint = (" (404: the server runs without VLLM_ALLOW_RUNTIME_LORA_UPDATING=True or without --enable-lora)"
                    if response.status_code == 404 else "")
            raise RuntimeError(f"{server.url} refused to load {adapter.path}: HTTP {response.status_code} "
                               f"{response.text[:300]}{hint}. Check the folder is readable on that server and its "
                               "rank fits the server's --max-lora-rank")
        loaded = time.perf_counter()
        await self._probe(server, adapter)
        return {"load_s": loaded - started, "probe_s": time.perf_counter() - loaded}

    async def _probe(self, server: UpstreamServer, adapter: Adapter) -> None:
        """weight_check's probe comparison, scored by this server under the adapter (raises WeightProbeMismatch)."""
        await verify_weights(_ServerScorer(self, server, adapter.name), adapter.path, adapter.version,
                             self._config, self._metrics, say=self._say)

    async def _unload_from(self, servers: list[UpstreamServer], name: str) -> None:
        for server in servers:
            if not server.healthy:
                server.stale.add(name)
                continue
            try:
                await self._unload_one(server, name)
            except Exception as error:  # retried by reconcile once the server answers
                log.warning("unloading %s from %s failed (%s): reconcile retries", name, server.url, error)
                server.stale.add(name)

    async def _unload_one(self, server: UpstreamServer, name: str) -> None:
        response = await self._call(server, "POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if response.status_code not in (200, 400, 404):  # 400/404: not loaded there, nothing to do
            raise RuntimeError(f"{server.url} refused to unload {name}: HTTP {response.status_code} "
                               f"{response.text[:300]}")

    async def _check_health(self, server: UpstreamServer) -> None:
        # short: reconcile holds the fleet's lock, and a host that swallows packets must not hold a push for long
        response = await self._call(server, "GET", "/health", timeout_s=min(self._timeout_s, HEALTH_TIMEOUT_S))
        if response.status_code != 200:
            self._mark_down(server, f"/health answered {response.status_code}")
            raise UpstreamUnavailable(f"{server.url}/health answered {response.status_code}")

    async def _models(self, server: UpstreamServer) -> dict[str, dict]:
        """What the server serves now: model name -> its card (an adapter's card names its base as "parent")."""
        response = await self._call(server, "GET", "/v1/models")
        response.raise_for_status()
        return {card["id"]: card for card in response.json()["data"]}

    async def _call(self, server: UpstreamServer, method: str, path: str, body: dict | None = None,
                    headers: dict | None = None, timeout_s: float | None = None) -> httpx.Response:
        """One request; a transport failure takes the server out of pick() and raises UpstreamUnavailable. A read
        (GET) that fails at the transport is sent once more first, on a new connection: a kept-alive connection the
        server closed as the request went out is not a server down (a benchmark's reconcile /health failed so, likely
        on a connection the server was closing, and took the only server out of rotation)."""
        if self._client is None:
            raise RuntimeError("UpstreamFleet used before start(): await fleet.start() first")
        retries = 1 if method == "GET" else 0
        while True:
            try:
                return await self._client.request(method, server.url + path, json=body, headers=headers,
                                                  timeout=timeout_s or self._timeout_s)
            except httpx.TransportError as error:
                if retries and not isinstance(error, httpx.TimeoutException):  # a timeout is not a closed connection
                    retries -= 1
                    continue  # httpx dropped the failed connection: the next try opens a new one
                self._mark_down(server, f"{type(error).__name__}: {error}")
                raise UpstreamUnavailable(f"{server.url}{path}: {type(error).__name__}: {error}") from error

    def _mark_down(self, server: UpstreamServer, reason: str) -> None:
        if server.healthy:
            self._say(f"serving upstream-out server={server.url} reason={reason!r}")
        server.healthy, server.reason = False, reason

    async def _reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.reconcile()

    def _require_base(self) -> str:
        if self.base_model is None:
            raise RuntimeError("UpstreamFleet used before start(): await fleet.start() first")
        return self.base_model


class _ServerScorer:
    """weight_check's Scorer over one server's /v1/completions: raw prompt logprobs under one model name."""

    def __init__(self, fleet: UpstreamFleet, server: UpstreamServer, model: str):
        self._fleet, self._server, self._model = fleet, server, model

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str) -> list[float]:
        ids = list(prompt_token_ids)
        response = await self._fleet._call(self._server, "POST", "/v1/completions", {
            "model": self._model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0},
            headers={"X-Request-Id": request_id})
        response.raise_for_status()
        scored = response.json()["choices"][0]["prompt_logprobs"][1:]  # the first token has no context: null
        return [entry[str(token)]["logprob"] for entry, token in zip(scored, ids[1:])]
