"""The distillation jobs: Kafka -> sessions -> trajectories -> table. Owned by the pipelines stage."""

from typing import Literal

from pydantic import Field

from liverl.config.section import Section


class PipelinesConfig(Section):
    consumer_group: str = "liverl-distill"
    """Name under which the distiller's progress is recorded (offsets live in the table's commits); batch id prefix."""
    follow_interval_s: float = Field(10.0, ge=0.0, le=24 * 3600.0)
    """`liverl distill --follow`: seconds between batches (0: the next starts as soon as one ends)."""
    runner: str = "DirectRunner"
    """Beam runner of the distill graph: "DirectRunner" (in process, or several local worker processes with
    beam_options ["--direct_num_workers=N", "--direct_running_mode=multi_processing"]); "PortableRunner" (a Beam
    job service, e.g. `python -m apache_beam.runners.portability.local_job_service_main`); "FlinkRunner" or
    "DataflowRunner" for scale-out (pipelines/README.md, configs/production.toml). The driver plans and commits;
    only the graph runs on the runner."""
    beam_options: list[str] = []
    """Beam pipeline flags passed as is to the runner, e.g. ["--flink_master=flink:8081", "--parallelism=8",
    "--environment_type=EXTERNAL", "--environment_config=localhost:50000"]. On a runner whose workers are
    other machines, state_uri must be shared storage (the batch refuses a local path)."""
    state_uri: str | None = None
    """Batch plans, staged outputs and pending sessions (any pyarrow filesystem URI). Workers write the staged
    outputs and read the carried state here, so on a distributed runner it must be shared storage (s3://,
    gs://); default: <table.trajectories_uri>/_liverl_distill (hidden from Parquet readers)."""
    reward_horizon_s: float = Field(3600.0, ge=0.0)
    """A session is ready this long after its end event, so delayed signals (edit kept/reverted, feedback) join it."""
    idle_timeout_s: float = Field(7200.0, gt=0.0)
    """A session without an end event is ready once nothing happened in it for this long."""
    late_event_retention_s: float = Field(7 * 24 * 3600.0, ge=0.0)
    """How long emitted sessions are remembered, so events arriving after emission count as "late_event"."""
    read_chunk_records: int = Field(default=5000, gt=0)
    """Offset ranges are split into chunks of at most this many records: the unit of read parallelism."""
    on_retention_gap: Literal["skip", "fail"] = "skip"
    """When Kafka retention deleted records the table had not read yet (its next offset is below the partition's
    earliest): "skip" records each gap as a `retention_gap` dead letter (topic, partition, expected offset,
    earliest available, records lost) plus a warning line and continues from the earliest offset; "fail"
    stops the batch with an error saying what to do. The records are lost either way."""
    read_timeout_s: float = Field(30.0, gt=0.0)
    """A worker reading a range fails the batch (nothing is committed) when no progress happens this long."""
    audit: bool = True
    """Log an MLflow run per committed batch in mlflow.audit_experiment (counts, offsets, rewards, samples)."""
    audit_sample_size: int = Field(20, ge=0)
    """Trajectories shown in each audit run's sample table."""
    trace_sample_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of sessions whose committed trajectories are logged as MLflow traces (in mlflow.audit_experiment,
    with the audit); the choice is a hash of (tenant, session), so a re-run picks the same ones. 0: no traces."""
    max_traces_per_batch: int = Field(default=20, ge=0)
    """At most this many traces per committed batch (the sampled trajectories with the smallest ids)."""
    trace_tokenizer: str | None = None
    """A Hugging Face tokenizer folder (the policy's) to decode model calls' token ids into text in traces;
    unset: a model-call span shows the session's texts around it (user message, tool results, tool calls)."""
    keep_state_batches: int = Field(3, ge=0)
    """Staged folders of older committed batches beyond this many are deleted."""
    table_retention_days: float = Field(0.0, ge=0.0, le=36500.0)
    """Trajectory rows whose session started, and dead letters recorded, more than this many days ago are deleted
    from the tables and their files vacuumed (`liverl retention`, and `liverl distill --follow` every
    retention_interval_s); 0: kept forever."""
    trace_retention_days: float = Field(0.0, ge=0.0, le=36500.0)
    """MLflow traces (mlflow.audit_experiment) of sessions that started more than this many days ago are deleted,
    by the same runs; 0: kept forever."""
    retention_interval_s: float = Field(3600.0, gt=0.0, le=7 * 24 * 3600.0)
    """`liverl distill --follow` applies the retention settings this often, between batches (never during one)."""
    vacuum_grace_hours: int = Field(1, ge=0, le=30 * 24)
    """Files the retention's delete replaced are removed from storage once replaced this long ago (a trainer
    reading an older table version meanwhile, or a distill batch writing, still finds its files); 0: at once (run
    `liverl retention` then only while nothing distills or trains). Until then those files hold the old rows."""
