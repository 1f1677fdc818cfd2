"""The Beam graph of one distillation batch: read ranges -> parse -> sessionize -> trajectories -> staged Parquet.

    PlanRanges -> Spread -> ReadOffsetRanges ──┐        (retention gaps met while reading -> dead letters)
    CarriedPending (last batch's pending files) ┴> AllRecords -> ParseRecords ──┐
    ClosedSessions (last batch's closed files) ──────────────────────────────┴> GroupBySession
      -> DecideReadiness -> BuildTrajectories -> SealTrajectories (privacy.encrypt_payloads) -> StageTrajectories
      dead letters of every step -> AllDeadLetters -> StampDeadLetters -> StageDeadLetters
      pending records -> StagePending; closed sessions -> StageClosed

Outputs land in the batch's staging folder; the driver commits them (pipelines/distill.py). The graph is
runner-agnostic: the same transforms run on DirectRunner here and on Flink or Dataflow (README.md).
"""

from __future__ import annotations

import apache_beam as beam

from liverl.config.rewards import RewardsConfig
from liverl.contracts.table_schema import DEAD_LETTER_SCHEMA, TRAJECTORY_SCHEMA
from liverl.contracts.trajectory_row import rows_to_table
from pipelines import dead_letters, parse, sessionize, traces, trajectories
from pipelines.kafka_source import GAP, SKIP, OffsetRange, ReadOffsetRange
from pipelines.records import CLOSED_SESSION_SCHEMA, RAW_RECORD_SCHEMA, RawRecord
from pipelines.seal_rows import SealTrajectories

# Staged outputs: name -> schema. The driver reads `<staging>/<name>-*.parquet`.
STAGED = {"trajectories": TRAJECTORY_SCHEMA, "dead_letters": DEAD_LETTER_SCHEMA, "pending": RAW_RECORD_SCHEMA,
          "closed": CLOSED_SESSION_SCHEMA, traces.STAGED_NAME: traces.TRACE_SOURCE_SCHEMA}


class DistillBatch(beam.PTransform):
    """PBegin -> {"trajectories": TrajectoryRows, "dead_letters", "pending", "closed": row dicts}."""

    def __init__(self, ranges: list[OffsetRange], carried_state: str | None,
                 events_topic: str, calls_topic: str, client_kwargs: dict, read_timeout_s: float,
                 timing: sessionize.Timing, rewards: RewardsConfig, batch_id: str, on_retention_gap: str = SKIP,
                 trace_sample_rate: float = 0.0, keys_dir: str | None = None, seal_rows: bool = False):
        """keys_dir: the subject key store that opens sealed record values (privacy.keys_dir). seal_rows: seal
        each row's token ids, and the staged trace sources, under its subject's key from that store
        (privacy.encrypt_payloads)."""
        super().__init__()
        if seal_rows and keys_dir is None:
            raise ValueError("seal_rows needs keys_dir: the key store the rows' subject keys live in")
        self._keys_dir = keys_dir
        self._seal_rows = seal_rows
        self._trace_sample_rate = trace_sample_rate  # sessions whose events are staged for MLflow traces
        self._on_retention_gap = on_retention_gap
        self._ranges, self._carried_state = ranges, carried_state
        self._topics = (events_topic, calls_topic)
        self._client_kwargs, self._read_timeout_s = client_kwargs, read_timeout_s
        self._timing, self._rewards, self._batch_id = timing, rewards, batch_id

    def expand(self, pbegin):
        read = (pbegin
                | "PlanRanges" >> beam.Create(self._ranges)
                | "Spread" >> beam.Reshuffle()
                | "ReadOffsetRanges" >> beam.ParDo(ReadOffsetRange(
                    self._client_kwargs, self._read_timeout_s, self._on_retention_gap)).with_outputs(GAP, main="records"))
        carried = (self._read_state(pbegin, "pending", "CarriedPending")
                   | "AsRawRecords" >> beam.Map(RawRecord.from_row))
        parsed = ((read.records, carried)
                  | "AllRecords" >> beam.Flatten()
                  | "ParseRecords" >> beam.ParDo(parse.ParseRecord(*self._topics, self._keys_dir)).with_outputs(
                      parse.DEAD, main="records"))
        closed = (self._read_state(pbegin, "closed", "ClosedSessions")
                  | "AsClosedPairs" >> beam.Map(closed_pair))
        decided = ({"records": parsed.records, "closed": closed}
                   | "GroupBySession" >> beam.CoGroupByKey()
                   | "DecideReadiness" >> beam.ParDo(sessionize.DecideSession(
                       self._timing, *self._topics, self._keys_dir)).with_outputs(
                       sessionize.PENDING, sessionize.CLOSED, sessionize.DEAD, main="ready"))
        built = decided.ready | "BuildTrajectories" >> beam.ParDo(trajectories.BuildTrajectories(
            self._rewards, self._batch_id, self._timing.as_of_ms)).with_outputs(trajectories.DEAD, main="rows")
        rows = built.rows
        if self._seal_rows:
            rows = rows | "SealTrajectories" >> beam.ParDo(SealTrajectories(self._keys_dir))
        dead = ((read[GAP], parsed[parse.DEAD], decided[sessionize.DEAD], built[trajectories.DEAD])
                | "AllDeadLetters" >> beam.Flatten()
                | "StampDeadLetters" >> beam.Map(stamp_dead_letter, self._batch_id, self._timing.as_of_ms))
        # The sampled sessions' events and calls, staged so that the driver can trace what it commits.
        sources = decided.ready | "TraceSources" >> beam.ParDo(traces.TraceSources(
            self._trace_sample_rate, self._keys_dir if self._seal_rows else None))
        return {"trajectories": rows, "dead_letters": dead, "pending": decided[sessionize.PENDING],
                "closed": decided[sessionize.CLOSED], traces.STAGED_NAME: sources}


    def _read_state(self, pbegin, name: str, label: str):
        """Rows a committed batch left for this one, read by the workers (never through the driver)."""
        if self._carried_state is None:
            return pbegin | label >> beam.Create([])
        return pbegin | label >> beam.io.ReadFromParquet(f"{self._carried_state.rstrip('/')}/{name}-*.parquet")


def closed_pair(row: dict) -> tuple[tuple[str, str], int]:
    """A closed-session row as ((tenant_id, session_id), closed_at_ms), the key ParseRecord groups by."""
    return (row.get("tenant_id") or "", row["session_id"]), row["closed_at_ms"]


def stamp_dead_letter(row: dict, batch_id: str, as_of_ms: int) -> dict:
    return row | {"batch_id": batch_id, "recorded_at_ms": as_of_ms, "event_date": dead_letters.utc_date(as_of_ms)}


def stage_outputs(outputs: dict, staging_uri: str) -> None:
    """Write each output to `<staging>/<name>-SSSSS-of-NNNNN.parquet` (always at least one file).

    Trajectories are typed TrajectoryRows, turned into Arrow by the contract's own rows_to_table (in batches,
    on the workers); the other outputs are plain row dicts.
    """
    for name, schema in STAGED.items():
        prefix = f"{staging_uri.rstrip('/')}/{name}"
        if name == "trajectories":
            (outputs[name]
             | "BatchTrajectories" >> beam.BatchElements(min_batch_size=1, max_batch_size=512)
             | "TrajectoryTables" >> beam.Map(rows_to_table)
             | "StageTrajectories" >> beam.io.WriteToParquetBatched(prefix, schema, file_name_suffix=".parquet"))
        else:
            outputs[name] | f"Stage{_camel(name)}" >> beam.io.WriteToParquet(prefix, schema, file_name_suffix=".parquet")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))
