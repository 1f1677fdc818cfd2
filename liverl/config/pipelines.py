"""The distillation jobs: Kafka -> sessions -> trajectories -> table. Owned by the pipelines stage."""

from liverl.config.section import Section


class PipelinesConfig(Section):
    consumer_group: str = "liverl-distill"
    """Name under which the distiller's progress is recorded (offsets live in the table's commits)."""
    follow_interval_s: float = 10.0
    """`liverl distill --follow`: seconds between batches."""
    runner: str = "DirectRunner"
    """Beam runner; FlinkRunner or DataflowRunner for scale-out."""
