"""How `liverl demo` runs the whole loop: duration, load, timeouts and what it leaves behind."""

from liverl.config.section import Section


class DemoRunConfig(Section):
    concurrency: int = 2
    """Sessions the product runs at once."""
    sessions_per_s: float = 3.0
    """Arrival rate of new sessions (users); 0: back to back. On 2 cores, vLLM answers far faster than
    Beam and DeepSpeed can learn from, so the demo paces its users like a real product's."""
    feedback_delay_s: float = 3.0
    """Simulated users judge an edit this long after the session (an hour in production)."""
    stage_timeout_s: float = 300.0
    """How long a stage may take to become ready (vLLM's first start is the slowest)."""
    progress_every_s: float = 15.0
    """Seconds between progress lines."""
    min_sessions_per_version: int = 12
    """A served version counts in the verdict only with at least this many sessions."""
    keep_stack: bool = False
    """Leave the broker and MLflow running after the demo (to browse the audit runs and lineage)."""
    capture_token: str = "demo-token"
    """The product's bearer token for the capture service (ingest.tenant_tokens holds the tenant's)."""
    serving_api_key: str = ""
    """The product's API key for serving, when serving requires keys."""
