"""Prometheus metrics of the policy server, on a registry of its own (several servers fit in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServingMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("liverl_serving_requests", "Completions served, by version, API and outcome",
                                ["version", "api", "outcome"], registry=r)
        self.prompt_tokens = Counter("liverl_serving_prompt_tokens", "Prompt tokens, by version", ["version"],
                                     registry=r)
        self.completion_tokens = Counter("liverl_serving_completion_tokens", "Completion tokens, by version",
                                         ["version"], registry=r)
        self.latency = Histogram("liverl_serving_request_seconds", "Request latency, by version", ["version"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("liverl_serving_in_flight", "Requests in flight, by version", ["version"], registry=r)
        self.swaps = Counter("liverl_serving_swaps", "Version switches, by outcome", ["outcome"], registry=r)
        self.swap_pause = Histogram("liverl_serving_swap_pause_seconds", "How long an in-place update held new "
                                    "requests", buckets=LATENCY_BUCKETS, registry=r)
        self.rollbacks = Counter("liverl_serving_rollbacks", "Rollbacks, by reason", ["reason"], registry=r)
        self.serving_version = Gauge("liverl_serving_version_info", "1 for the version taking traffic, by role",
                                     ["version", "role"], registry=r)
        self.weight_probes = Counter("liverl_serving_weight_probes", "Weight probe checks after a load or swap, by "
                                     "outcome (match, mismatch, unreadable, missing)", ["outcome"], registry=r)
        self.signature_refusals = Counter("liverl_serving_signature_refusals", "Registry versions refused because "
                                          "their files or gate verdict do not carry the trainer's signature",
                                          registry=r)
        self.rejected = Counter("liverl_serving_rejected_requests", "Requests refused, by reason", ["reason"],
                                registry=r)
        self.cross_tenant = Counter("liverl_serving_cross_tenant_refusals", "Requests refused for naming another "
                                    "tenant than their API key's, by the key's tenant", ["tenant"], registry=r)
        self.records = Counter("liverl_serving_records", "ModelCall records, by outcome (sent, spooled, replayed, "
                               "dropped, failed, opt_out: never built, forgotten: its user was erased)", ["outcome"],
                               registry=r)
        self.user_links = Counter("liverl_serving_user_links", "(user, session) pairs of recorded calls written to "
                                  "the key store for `liverl forget --user`, by outcome (linked, failed)", ["outcome"],
                                  registry=r)
        self.recording_lag = Histogram("liverl_serving_recording_lag_seconds",
                                       "From completion finished to record acknowledged by Kafka",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.recording_queue = Gauge("liverl_serving_recording_queue", "Records waiting in memory", registry=r)
        self.spool_bytes = Gauge("liverl_serving_spool_bytes", "Bytes waiting in the disk spool", registry=r)
        self.forced_tool_call_unmet = Counter("liverl_serving_forced_tool_call_unmet", "Replies to a forced "
                                              "tool_choice that did not complete the forced tool call (sent as "
                                              "content), by API", ["api"], registry=r)
        self.dead_letters = Counter("liverl_serving_dead_letters", "Bad requests sent to the dead-letter topic",
                                    ["reason"], registry=r)
        self._per_version: dict[str, VersionMetrics] = {}

    def of_version(self, version: str) -> VersionMetrics:
        """The per-request metrics of one version, with their labels resolved once: `labels()` checks its
        arguments and takes a lock on every call, and a completion touches five of them."""
        found = self._per_version.get(version)
        if found is None:
            found = self._per_version[version] = VersionMetrics(self, version)
        return found

    def serve(self, host: str, port: int):
        """Expose /metrics on host:port; returns the server (shutdown() stops it)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when absent): for tests, the bench and logs."""
        return self.registry.get_sample_value(name, labels or {}) or 0.0


class VersionMetrics:
    """The children of ServingMetrics' per-version metrics for one version (ServingMetrics.of_version)."""

    def __init__(self, metrics: ServingMetrics, version: str):
        self.version = version
        self.in_flight = metrics.in_flight.labels(version)
        self.latency = metrics.latency.labels(version)
        self.prompt_tokens = metrics.prompt_tokens.labels(version)
        self.completion_tokens = metrics.completion_tokens.labels(version)
        self._requests_metric = metrics.requests
        self._requests: dict[tuple[str, str], MetricWrapperBase] = {}

    def requests(self, api: str, outcome: str) -> MetricWrapperBase:
        key = (api, outcome)
        found = self._requests.get(key)
        if found is None:
            found = self._requests[key] = self._requests_metric.labels(self.version, api, outcome)
        return found
