"""Prometheus metrics of the capture service, on a registry of its own (several services per process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)


class CaptureMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.accepted = Counter("liverl_ingest_events_accepted", "Events acknowledged (in Kafka or the spool).",
                                ["tenant"], registry=r)
        self.rejected = Counter("liverl_ingest_events_rejected", "Events refused, by reason (each dead-lettered).",
                                ["reason"], registry=r)
        self.requests_rejected = Counter("liverl_ingest_requests_rejected",
                                         "Whole requests refused (auth, size, framing), by reason.", ["reason"],
                                         registry=r)
        self.duplicates = Counter("liverl_ingest_events_duplicate", "Events resent after being stored: acknowledged "
                                  "again, not stored twice.", ["tenant"], registry=r)
        self.cross_tenant = Counter("liverl_ingest_cross_tenant_attempts", "Requests or events naming another "
                                    "tenant than the caller's token (refused), by the caller's tenant.", ["tenant"],
                                    registry=r)
        self.redacted = Counter("liverl_ingest_redactions", "Redacted matches, by detector.", ["kind"], registry=r)
        self.spooled = Counter("liverl_ingest_records_spooled", "Records written to the local spool (Kafka down).",
                               registry=r)
        self.drained = Counter("liverl_ingest_records_drained", "Spooled records delivered to Kafka.", registry=r)
        self.dropped = Counter("liverl_ingest_events_dropped", "Events dropped at the edge, by reason (opt-out).",
                               ["reason"], registry=r)
        self.dead_letters = Counter("liverl_ingest_dead_letters", "Dead letters written.", ["reason"], registry=r)
        self.spool_depth = Gauge("liverl_ingest_spool_records", "Records waiting in the spool.", registry=r)
        self.kafka_up = Gauge("liverl_ingest_kafka_direct", "1 when events go straight to Kafka, 0 when spooling.",
                              registry=r)
        self.end_to_end = Histogram("liverl_ingest_end_to_end_seconds",
                                    "Event time (producer clock) to Kafka acknowledgement.",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.forwarded = Counter("liverl_ingest_events_forwarded", "Events forwarded to the replica owning their "
                                 "session, by owner.", ["owner"], registry=r)
        self.forward_failures = Counter("liverl_ingest_forward_failures", "Forwarded batches the owner did not "
                                        "answer (the caller resends them), by owner.", ["owner"], registry=r)
        self.request_seconds = Histogram("liverl_ingest_request_seconds", "Capture request handling time.",
                                         ["api"], registry=r)
