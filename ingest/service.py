"""The capture service assembled: gRPC + HTTP front ends over one core, spool and session state.

    server = CaptureServer(config).start()   # binds; port 0 in config picks a free one
    server.grpc_address, server.http_address
    server.stop()                            # graceful: finish requests, flush Kafka, keep the spool
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ingest.auth import TokenAuth
from ingest.capture import CaptureCore, capture_subjects
from ingest.delivery import KafkaDelivery
from ingest.grpc_api import SERVICE_NAME, CaptureHandler
from ingest.metrics import CaptureMetrics
from ingest.routing import PeerForwarder, ReplicaRing
from ingest.sessions import SessionRegistry
from liverl.config import LiverlConfig
from liverl.io.spool import Spool
from liverl.privacy import sealer_for

log = logging.getLogger("liverl.ingest.service")
GRPC_THREADS = 16  # half of them at most wait on other replicas (ingest/routing.py)


def spool_dir(config: LiverlConfig) -> Path:
    return config.ingest.spool_dir or config.stack.data_dir / "ingest" / "spool"


def replica_ring(config: LiverlConfig) -> ReplicaRing:
    """The replicas sharing this service's sessions (ingest.replicas), checked before anything binds."""
    ingest = config.ingest
    if len(ingest.replicas) > 1 and not ingest.replica_token:
        raise ValueError("ingest.replicas names several replicas but ingest.replica_token is empty; set it to a "
                         "secret shared by the replicas (it marks the requests they forward to each other)")
    if len(ingest.replicas) > 1 and not ingest.grpc_port:
        raise ValueError("ingest.replicas needs a fixed ingest.grpc_port: the other replicas dial it")
    return ReplicaRing(ingest.replicas, ingest.replica_address or f"{ingest.host}:{ingest.grpc_port}")


class CaptureServer:
    def __init__(self, config: LiverlConfig):
        self.config = config
        ingest = config.ingest
        folder = spool_dir(config)
        self.metrics = CaptureMetrics()
        self.auth = TokenAuth(ingest.tenant_tokens)
        self.ring = replica_ring(config)
        self.peers = PeerForwarder(ingest.tenant_tokens, ingest.replica_token, ingest.tls_cert_file,
                                   max_waiting=GRPC_THREADS // 2)
        self.spool = Spool(folder / "kafka", max_bytes=ingest.max_spool_bytes)
        subjects = capture_subjects(config)  # keyed pseudonyms: the session state holds no raw id
        self.sessions = SessionRegistry(folder / "sessions.sqlite", int(ingest.late_event_horizon_s * 1000),
                                        ingest.enforce_sessions, now_ms=int(time.time() * 1000),
                                        start_grace_ms=int(ingest.session_start_grace_s * 1000),
                                        scope=self.ring.scope, pseudonym=subjects.pseudonyms.session)
        sealer = sealer_for(config, subjects.pseudonyms)
        self.delivery = KafkaDelivery(config.kafka, self.spool, self.metrics, ingest.kafka_ack_timeout_s,
                                      seal=sealer.seal_all if sealer else None)
        self.core = CaptureCore(config, self.delivery, self.sessions, self.metrics, ring=self.ring, peers=self.peers,
                                subjects=subjects)
        self.grpc_port = 0
        self.http_port = 0
        self.metrics_port = 0
        self._grpc = None
        self._http = None
        self._http_thread = None
        self._metrics_server = None

    @property
    def grpc_address(self) -> str:
        return f"{self.config.ingest.host}:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        return f"{self.config.ingest.host}:{self.http_port}"

    def start(self) -> "CaptureServer":
        from liverl.config.exposure import refuse_shipped_secrets

        ingest = self.config.ingest
        refuse_shipped_secrets(ingest.host, "ingest.host", ingest.redaction, ingest.tenant_tokens)
        if not self.config.ingest.tenant_tokens:
            log.warning("ingest.tenant_tokens is empty: every request will be refused as unauthenticated")
        self.delivery.start()
        self._start_grpc()
        if self.config.ingest.http_port:
            self._start_http()
        if self.config.ingest.metrics_port:
            from prometheus_client import start_http_server

            self._metrics_server, _ = start_http_server(self.config.ingest.metrics_port, self.config.ingest.host,
                                                        registry=self.metrics.registry)
            self.metrics_port = self._metrics_server.server_port
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace_s).wait()
        if self._http is not None:
            self._http.should_exit = True
            self._http_thread.join(timeout=grace_s + 5)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        self.peers.close()
        self.delivery.close()
        self.sessions.close()

    def _start_grpc(self) -> None:
        ingest = self.config.ingest
        options = [("grpc.max_receive_message_length", ingest.max_request_bytes),
                   ("grpc.so_reuseport", 0)]
        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=GRPC_THREADS, thread_name_prefix="capture"),
                                 options=options)
        handler = CaptureHandler(self.core, self.auth, ingest.max_batch_events, self.peers)
        self._grpc.add_generic_rpc_handlers((handler.generic_handler(),))
        health_servicer = health.HealthServicer()
        health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, self._grpc)
        address = f"{ingest.host}:{ingest.grpc_port}"
        if ingest.tls_cert_file and ingest.tls_key_file:
            credentials = grpc.ssl_server_credentials([(ingest.tls_key_file.read_bytes(),
                                                        ingest.tls_cert_file.read_bytes())])
            self.grpc_port = self._grpc.add_secure_port(address, credentials)
        else:
            self.grpc_port = self._grpc.add_insecure_port(address)
        if not self.grpc_port:
            raise RuntimeError(f"cannot bind gRPC to {address}; set --ingest.grpc_port to a free port")
        self._grpc.start()

    def _start_http(self) -> None:
        import uvicorn

        from ingest.http_api import build_app

        ingest = self.config.ingest
        app = build_app(self.core, self.auth, ingest.max_batch_events, ingest.max_request_bytes,
                        tokenizer_dir=ingest.otlp_tokenizer_dir or self.config.serving.policy_dir)
        tls = {}
        if ingest.tls_cert_file and ingest.tls_key_file:
            tls = {"ssl_certfile": str(ingest.tls_cert_file), "ssl_keyfile": str(ingest.tls_key_file)}
        server_config = uvicorn.Config(app, host=ingest.host, port=ingest.http_port, log_level="warning",
                                       access_log=False, lifespan="off", **tls)
        self._http = uvicorn.Server(server_config)
        # uvicorn installs signal handlers only on the main thread: in this thread the CLI keeps them.
        self._http_thread = threading.Thread(target=self._http.run, name="capture-http", daemon=True)
        self._http_thread.start()
        deadline = time.monotonic() + 30
        while not self._http.started:
            if not self._http_thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP endpoint did not start on {ingest.host}:{ingest.http_port}; "
                                   "set --ingest.http_port to a free port")
            time.sleep(0.02)
        self.http_port = self._http.servers[0].sockets[0].getsockname()[1]
