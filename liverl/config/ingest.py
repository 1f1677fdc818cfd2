"""The capture service (shadow backend) and the SDK defaults. Owned by the ingest stage."""

from pathlib import Path

from pydantic import Field

from liverl.config.redaction import RedactionConfig
from liverl.config.section import Section


class IngestConfig(Section):
    host: str = "127.0.0.1"
    """Address both listeners bind to (0.0.0.0 in a container)."""
    grpc_port: int = Field(50051, ge=0, le=65535)
    """CaptureService gRPC port."""
    http_port: int = Field(8081, ge=0, le=65535)
    """HTTP JSON endpoint for products not written in Python (POST /v1/capture); 0 disables."""
    metrics_port: int = Field(9101, ge=0, le=65535)
    """Prometheus metrics; 0 disables (the HTTP endpoint serves /metrics too)."""
    tenant_tokens: dict[str, str] = {"demo": "demo-token"}
    """tenant id -> bearer token. Every request must carry its tenant's token."""
    tls_cert_file: Path | None = None
    """PEM certificate chain; set with tls_key_file to serve gRPC and HTTP over TLS."""
    tls_key_file: Path | None = None
    """PEM private key of tls_cert_file."""
    spool_dir: Path | None = None
    """Durable local spool (events acknowledged while Kafka is unreachable) and session state;
    default: <stack.data_dir>/ingest/spool. A restarted service must reuse the same folder."""
    max_spool_bytes: int = Field(1 << 30, ge=1)
    """Past this the service stops acknowledging (callers retry) instead of filling the disk."""
    kafka_ack_timeout_s: float = Field(5.0, gt=0.0)
    """How long a request waits for Kafka's acks=all before its events go to the spool instead."""
    max_event_bytes: int = Field(256 * 1024, ge=1)
    """Largest serialized SessionEvent accepted."""
    max_batch_events: int = Field(1000, ge=1)
    """Most events in one request."""
    max_events_per_request: int = Field(default=10_000, ge=1, le=1_000_000)
    """Most SessionEvents and ModelCalls one OTLP request (POST /v1/traces) may become: one span fans out
    (each of its messages and tool calls is an event), so a small body could otherwise fill the spool.
    Over it the request is refused whole (413 too_many_events, dead-lettered) before anything is built;
    the rate limit is charged per event, not per span."""
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1)
    """Largest request body (gRPC message or HTTP body)."""
    handler_timeout_s: float = Field(10.0, ge=0.0)
    """Most time one request may take in the service (or the caller's gRPC deadline, if sooner); events
    not reached by then are answered "deadline_exceeded" (not stored: resend just those)."""
    rate_limit_events_per_s: float = Field(5000.0, ge=0.0)
    """Events per second per tenant (token bucket); over it, gRPC RESOURCE_EXHAUSTED or HTTP 429 with a
    retry delay. 0 disables."""
    rate_limit_burst_events: int = Field(20000, ge=1)
    """Events a tenant may send at once above its rate (the bucket's size)."""
    dedupe_window_events: int = Field(100_000, ge=0)
    """Event ids remembered per service (per tenant) so an event resent after a lost answer is
    acknowledged again without being stored twice. 0 disables."""
    max_future_skew_s: float = Field(300.0, ge=0.0)
    """Events stamped further than this in the future are rejected (clock_skew)."""
    max_event_age_s: float = Field(7 * 24 * 3600.0, gt=0.0)
    """Events older than this are rejected (too_old); SDK spools may hold events for hours."""
    enforce_sessions: bool = True
    """Reject events of sessions never seen to start (unknown_session) or already closed (closed_session).
    Across replicas the session's owner (ingest.replicas) applies these rules, so they hold as on one."""
    session_start_grace_s: float = Field(60.0, ge=0.0)
    """An event numbered after its session's start (sequence > 0) may overtake that start in flight
    (concurrent requests, retries): it is accepted for this long after the session's first event, and
    unknown_session after that if the start never came."""
    replicas: list[str] = []
    """gRPC addresses (host:port) of every capture replica, this one included, the same list on each.
    Each session belongs to one replica (rendezvous hash of tenant/session), which holds its state and
    de-duplication; the others forward its events there, so any load balancer works. Empty: one replica."""
    replica_token: str = ""
    """A secret the replicas share (required with two or more): forwarded requests carry it, so the owner
    neither charges them to the rate limit again nor forwards them on."""
    replica_address: str = ""
    """This replica's own entry in ingest.replicas (default: host:grpc_port), e.g. the pod's stable name."""
    replica_forward_timeout_s: float = Field(5.0, gt=0.0)
    """How long a replica waits for the owner of a forwarded session; past it (or if the owner is down)
    those events are answered "deadline_exceeded" (not stored: the SDK resends them)."""
    late_event_horizon_s: float = Field(24 * 3600.0, ge=0.0)
    """Feedback and outcomes of a closed session are accepted for this long after it closed."""
    opt_out_tenants: list[str] = []
    """Tenants whose events are dropped at the edge (counted, never stored)."""
    opt_out_users: dict[str, list[str]] = {}
    """tenant id -> user ids whose events are dropped at the edge."""
    otlp_tokenizer_dir: Path | None = None
    """The policy's Hugging Face folder whose tokenizer rebuilds token ids of spans posted to /v1/traces (OTLP);
    default: serving.policy_dir. With neither, /v1/traces answers 501 and says to set one."""
    redaction: RedactionConfig = RedactionConfig()
    """Masking of personal data and secrets."""
