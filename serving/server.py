"""The policy server: one event loop hosting the engines, gRPC, the HTTP API, metrics and the watcher.

    server = PolicyServer(config)
    await server.start()     # loads the alias's version (waits for it), prints the ready line
    ...                      # serves; the watcher hot-swaps as the alias moves
    await server.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.access.opt_out import OptOut
from liverl.config import LiverlConfig
from liverl.config.exposure import refuse_shipped_secrets
from liverl.v1 import serving_pb2
from serving.auth import Keys, refuse_open_exposure
from serving.generation import CompletionLimits, Completions
from serving.metrics import ServingMetrics
from serving.rate_limit import RateLimiter
from serving.router import Router, underlying
from serving.swap.rollout import Rollout

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry
    from serving.recording.recorder import Recorder

log = logging.getLogger("liverl.serving")

WAIT_FOR_ALIAS_LOG_EVERY_S = 30.0


class PolicyServer:
    def __init__(self, config: LiverlConfig, say: Callable[[str], None] = print):
        self.config = config
        self.say = say
        c = config.serving
        self.work_dir = Path(c.work_dir or Path(config.stack.data_dir) / "serving")
        self.metrics = ServingMetrics()
        self.router = Router(canary_fraction=c.canary_fraction)
        self.keys = Keys(c.api_keys, c.admin_api_keys, c.tenant_id)
        self.limiter = RateLimiter(c.rate_limit_per_s, c.rate_limit_burst)
        self.registry: ModelRegistry | None = None
        self.recorder: Recorder | None = None
        self.rollout: Rollout | None = None
        self.completions: Completions | None = None
        self.grpc_port = 0
        self.http_port = 0
        self._grpc = None
        self._health = None
        self._http = None
        self._http_task: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None
        self.responses = None  # serving.http.responses.state.ResponseStore, made by start()
        self.erasure_sweep = None  # serving.recording.erasure_sweep.ErasureSweep, when recording
        self._sweeper: asyncio.Task | None = None
        self._metrics_server = None

    def _pseudonyms(self):
        """The key store's keyed pseudonyms (the recorder's, when recording: one tenant key cache per process)."""
        if self.recorder is not None and self.recorder.subjects is not None:
            return self.recorder.subjects.pseudonyms
        from liverl.privacy import key_store
        from liverl.privacy.pseudonyms import Pseudonyms

        return Pseudonyms(key_store(self.config), self.config.privacy.key_cache_size)

    async def start(self) -> None:
        c = self.config.serving
        refuse_open_exposure(c.host, self.keys, c.allow_open)  # before anything is loaded or bound
        refuse_shipped_secrets(c.host, "serving.host", self.config.ingest.redaction)  # it pseudonymises records
        if c.policy_dir is None:
            from liverl.io.registry import ModelRegistry

            self.registry = ModelRegistry(self.config.mlflow.tracking_uri, self.config.mlflow.registered_model)
        if c.record:
            from liverl.privacy import sealer_for
            from serving.recording.recorder import Recorder
            from serving.recording.subjects import serving_subjects

            subjects = serving_subjects(self.config)  # each call's user linked to its session, for `forget --user`
            sealer = sealer_for(self.config, subjects.pseudonyms)  # model calls hold the users' text as token ids
            self.recorder = Recorder(self.config.kafka, self.work_dir / "spool", self.metrics, c.record_queue_size,
                                     c.spool_max_bytes, c.record_linger_s,
                                     seal=sealer.seal_all if sealer else None, subjects=subjects).start()
        pseudonyms = self._pseudonyms()
        self.router.session_key = pseudonyms.session  # the canary's sessions: secret, and alike on every replica
        self.rollout = Rollout(c, self.router, self.metrics, self.registry, self.work_dir / "versions", self.say)
        if c.policy_dir is not None:
            await self.rollout.start_with(c.policy_dir_version, Path(c.policy_dir))
        else:
            await self.rollout.start_with(await self._wait_for_alias())
        limits = CompletionLimits(c.max_model_len, c.default_max_tokens, c.max_prompt_chars, c.request_timeout_s)
        self.completions = Completions(self.router, self.recorder, self.metrics, self.config.mlflow.registered_model,
                                       limits, c.tenant_id, self.config.ingest.redaction,
                                       OptOut.of(self.config.ingest))
        self.completions.user_pseudonym = pseudonyms.user  # OpenAI's `user` is never stored as given
        from serving.recording.stitching import Stitcher

        self.completions.stitcher = Stitcher.from_config(c, self.metrics.registry)  # header-less sessions (rule 6)
        from serving.http.responses.state import ResponseStore

        self.responses = ResponseStore.from_config(c)  # what previous_response_id continues
        self._start_erasure_sweep()
        await self._start_grpc()
        await self._start_http()
        if c.metrics_port:
            self._metrics_server = self.metrics.serve(c.host, c.metrics_port)
        if self.registry is not None:
            self._watcher = asyncio.create_task(self.rollout.watch())  # the shared alias and every tenant's
        elif c.tenants.active:
            self.say("serving tenants-ignored reason=policy_dir (per-tenant adapters follow registry aliases: unset "
                     "serving.policy_dir to serve them)")
        self.say(f"serving ready grpc={c.host}:{self.grpc_port} http={c.host}:{self.http_port} "
                 f"version={self.router.champion.version} engine={c.engine} alias={c.alias} swap_mode={c.swap_mode}"
                 + (f" replica={self.rollout.fleet.replica}" if self.rollout.fleet is not None else ""))

    def _start_erasure_sweep(self) -> None:
        """When recording (a key store says who was erased), what `liverl forget` erased leaves memory too."""
        subjects = self.recorder.subjects if self.recorder is not None else None
        if subjects is None:
            return
        from functools import partial

        from serving.http.completions import session_erased
        from serving.recording.erasure_sweep import ErasureSweep

        stitcher = self.completions.stitcher
        kept = [self.responses, *((stitcher.entries, stitcher.quoted) if stitcher is not None else ())]
        self.erasure_sweep = ErasureSweep(kept, subjects.erasure_state, partial(session_erased, self.completions),
                                          self.config.serving.erasure_sweep_s)
        self._sweeper = asyncio.create_task(self.erasure_sweep.run())

    async def _wait_for_alias(self) -> str:
        """The version the alias points at; waits (polling) until the alias exists."""
        c = self.config.serving
        last_said = -WAIT_FOR_ALIAS_LOG_EVERY_S
        while True:
            problem = "unset"
            try:
                version = await asyncio.to_thread(self.registry.alias_version, c.alias)
                if version:
                    return version
            except Exception as error:  # registry not up yet: keep waiting, say why
                problem = f"{type(error).__name__}: {str(error)[:200]}"
            if time.monotonic() - last_said >= WAIT_FOR_ALIAS_LOG_EVERY_S:
                last_said = time.monotonic()
                self.say(f"serving waiting alias={c.alias} model={self.config.mlflow.registered_model} "
                         f"registry={self.config.mlflow.tracking_uri} problem={problem!r}")
            await asyncio.sleep(c.watch_interval_s)

    async def _start_grpc(self) -> None:
        from grpc_health.v1 import health_pb2

        from serving.grpc_api import build_grpc_server

        c = self.config.serving
        self._grpc, self.grpc_port, self._health = build_grpc_server(
            c.host, c.grpc_port, self.completions, self.model_info, self.rollout, self.keys, self.limiter,
            c.max_request_bytes, tls=_tls_pair(c))
        await self._grpc.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)

    async def _set_health(self, status: int) -> None:
        """The gRPC health status of the server and of the policy service."""
        from serving.grpc_api import POLICY_SERVICE

        for service in ("", POLICY_SERVICE):
            await self._health.set(service, status)

    async def _start_http(self) -> None:
        import uvicorn

        from serving.http.api import build_http_app
        from serving.http.guard import HttpContext

        c = self.config.serving
        app = build_http_app(HttpContext(self.completions, self.model_info, self.rollout, self.keys, self.limiter,
                                         c.max_request_bytes, c.body_timeout_s, self.engine_failure), self.responses)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((c.host, c.http_port))
        self.http_port = sock.getsockname()[1]
        # httptools: uvicorn's C HTTP parser (h11, the pure-Python one, costs far more per request); the event
        # loop is the server's own, uvloop when `liverl serve` runs it (serving.cli). No proxy-headers layer:
        # nothing here reads the client's address, so rewriting it from X-Forwarded-For is work per request.
        self._http = _uvicorn_without_signals(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                             access_log=False, http="httptools", ws="none",
                                                             proxy_headers=False,
                                                             ssl_certfile=c.tls_cert_file, ssl_keyfile=c.tls_key_file))
        self._http_task = asyncio.create_task(self._http.serve(sockets=[sock]))
        while not self._http.started:
            if self._http_task.done():
                self._http_task.result()  # raises what stopped it
            await asyncio.sleep(0.02)

    def model_info(self) -> serving_pb2.ModelInfoResponse:
        champion, canary = self.router.champion, self.router.canary
        c = self.config.serving
        return serving_pb2.ModelInfoResponse(
            model_name=self.config.mlflow.registered_model, policy_version=champion.version if champion else "",
            alias=c.alias if c.policy_dir is None else "", source_uri=champion.source_uri if champion else "",
            loaded_at_ms=champion.loaded_at_ms if champion else 0, max_model_len=c.max_model_len, engine=c.engine,
            canary_version=canary.version if canary else "")

    def engine_failure(self) -> str | None:
        """Why the engine serving the champion (or the canary) can no longer serve; None while it can."""
        for slot in (self.router.champion, self.router.canary):
            failure = underlying(slot.engine).failure() if slot is not None else None
            if failure:
                return failure
        return None

    async def mark_not_serving(self) -> None:
        """Health checks answer NOT_SERVING from now on (gRPC) and 503 (HTTP /health), so balancers stop
        routing here while the process stops."""
        from grpc_health.v1 import health_pb2

        if self._health is not None:
            await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking requests, let those in flight finish (up to grace_s), flush records, free engines."""
        for task in (self._watcher, self._sweeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._grpc is not None:
            await self._grpc.stop(grace_s)
        if self._http is not None:
            self._http.should_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._http_task, grace_s + 5)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self.rollout is not None:
            await self.rollout.close()
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close, grace_s)


def _tls_pair(c) -> tuple[bytes, bytes] | None:
    """(key, certificate chain) PEM bytes when serving speaks TLS; None for plaintext."""
    if c.tls_cert_file is None:
        return None
    return Path(c.tls_key_file).read_bytes(), Path(c.tls_cert_file).read_bytes()


def _uvicorn_without_signals(config):
    """A uvicorn.Server that leaves SIGINT/SIGTERM to `liverl serve` (uvicorn would take them over)."""
    import uvicorn

    class Server(uvicorn.Server):
        def capture_signals(self):
            return contextlib.nullcontext()

    return Server(config)
