"""The demo agent product and the whole-loop run of `liverl demo`."""

from liverl.config.demo_run import DemoRunConfig
from liverl.config.section import Section


class DemoConfig(Section):
    duration_s: float = 600.0
    """How long `liverl demo` runs the loop."""
    seed: int = 0
    tenant_id: str = "demo"
    run: DemoRunConfig = DemoRunConfig()
    """How `liverl demo` runs the loop (liverl/config/demo_run.py)."""
