"""The distillation jobs: Kafka -> sessions -> trajectories -> table. Owned by the pipelines stage."""

from typing import Literal

from pydantic import Field

from liverl.config.section import Section


class PipelinesConfig(Section):
    consumer_group: str = "liverl-distill"
    """Name under which the distiller's progress is recorded (offsets live in the table's commits); batch id prefix."""
    follow_interval_s: float = 10.0
    """`liverl distill --follow`: seconds between batches."""
    runner: str = "DirectRunner"
    """Beam runner; FlinkRunner or DataflowRunner for scale-out (see pipelines/README.md)."""
    beam_options: list[str] = []
    """Extra Beam pipeline flags for the runner, e.g. ["--flink_master=flink:8081", "--parallelism=8"]."""
    state_uri: str | None = None
    """Batch plans, staged outputs and pending sessions (any pyarrow filesystem URI; shared storage on a
    distributed runner); default: <table.trajectories_uri>/_liverl_distill (hidden from Parquet readers)."""
    reward_horizon_s: float = 3600.0
    """A session is ready this long after its end event, so delayed signals (edit kept/reverted, feedback) join it."""
    idle_timeout_s: float = 7200.0
    """A session without an end event is ready once nothing happened in it for this long."""
    late_event_retention_s: float = 7 * 24 * 3600.0
    """How long emitted sessions are remembered, so events arriving after emission count as "late_event"."""
    read_chunk_records: int = Field(default=5000, gt=0)
    """Offset ranges are split into chunks of at most this many records: the unit of read parallelism."""
    on_retention_gap: Literal["skip", "fail"] = "skip"
    """When Kafka retention deleted records the table had not read yet (its next offset is below the partition's
    earliest): "skip" records each gap as a `retention_gap` dead letter (topic, partition, expected offset,
    earliest available, records lost) plus a warning line and continues from the earliest offset; "fail"
    stops the batch with an error saying what to do. The records are lost either way."""
    read_timeout_s: float = 30.0
    """A worker reading a range fails the batch (nothing is committed) when no progress happens this long."""
    audit: bool = True
    """Log an MLflow run per committed batch in mlflow.audit_experiment (counts, offsets, rewards, samples)."""
    audit_sample_size: int = 20
    """Trajectories shown in each audit run's sample table."""
    keep_state_batches: int = 3
    """Staged folders of older committed batches beyond this many are deleted."""
