"""The capture service (shadow backend) and the SDK defaults. Owned by the ingest stage."""

from liverl.config.section import Section


class IngestConfig(Section):
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    """CaptureService gRPC port."""
    http_port: int = 8081
    """HTTP JSON endpoint for products not written in Python."""
    metrics_port: int = 9101
    """Prometheus metrics; 0 disables."""
    tenant_tokens: dict[str, str] = {"demo": "demo-token"}
    """tenant id -> bearer token. Every request must carry its tenant's token."""
