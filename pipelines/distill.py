"""One distillation batch, end to end: plan -> run the Beam graph -> commit exactly once -> audit.

    plan      fix [start, end) per partition (start: the last commit's offsets; end: fetch high-water mark)
              and the batch clock; written ahead to <state>/plans/<seq>.json, reused until committed
    distill   run DistillBatch on the configured runner; outputs staged as Parquet in <state>/batches/<seq>
    commit    dead letters, then trajectories + offsets + state pointer as ONE Delta version, each guarded
              by the Delta app transaction (DISTILL_APP_ID, seq); the staged files are streamed, never loaded whole
    audit     an MLflow run for the committed batch, by `auditor`: here before returning (default), or on
              the follower's thread (`liverl distill --follow`); every committed batch not audited yet (a
              crash, MLflow down) is audited by the next run, oldest first (pipelines/audit.py)

`on_phase(name)` is called between phases ("planned", "distilled", "before_commit", "during_commit",
"after_commit"): tests raise from it to inject crashes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.contracts.table_schema import DEAD_LETTER_SCHEMA, TRAJECTORY_SCHEMA
from liverl.rewards.custom import reward_version
from pipelines import table
from pipelines.kafka_source import earliest_offsets, find_retention_gaps, high_water_marks, plan_ranges, record_gaps
from pipelines.pending import PendingSessions, pending_sessions
from pipelines.records import RAW_RECORD_SCHEMA
from pipelines.sessionize import Timing
from pipelines.state import BatchPlan, StagedOutput, StateStore


@dataclass
class BatchReport:
    seq: int
    batch_id: str
    committed: bool  # False: nothing new to do, no commit
    table_version: int | None = None
    sessions: int = 0  # sessions emitted as trajectories
    trajectories: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)  # reason -> count
    counters: dict[str, int] = field(default_factory=dict)  # Beam counters: records_read, duplicates, ...
    workers: dict[str, int] = field(default_factory=dict)  # worker process ("host:pid") -> Kafka records it read
    offsets: dict = field(default_factory=dict)
    seconds: float = 0.0
    pending: PendingSessions | None = None  # what the batch held back and why (None: the graph did not run)

    def summary(self) -> dict:
        return {"sessions": self.sessions, "trajectories": self.trajectories, "dead_letters": self.dead_letters,
                **self.counters, **({"pending": self.pending.to_summary()} if self.pending else {})}

    def line(self) -> str:
        """One dense line per batch, as `liverl distill` prints it."""
        dead = sum(self.dead_letters.values())
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.dead_letters.items()))
        offsets = " ".join(f"{topic.rsplit('.', 1)[-1]}[" + " ".join(f"{p}:{a}-{b}" for p, (a, b) in parts.items())
                           + "]" for topic, parts in self.offsets.items())
        state = f"table v{self.table_version}" if self.committed else "nothing new"
        pending = self.pending.note() if self.pending else f"pending {self.counters.get('sessions_pending', 0)}"
        warning = self.pending.warning(emitted=self.sessions) if self.pending else None
        return (f"batch {self.batch_id} | sessions {self.sessions} ({pending})"
                f" | trajectories {self.trajectories} | dead letters {dead}{f' ({reasons})' if reasons else ''}"
                f" | dup {self.counters.get('duplicates', 0)} late {self.counters.get('late_events', 0)}"
                f" | offsets {offsets} | workers {len(self.workers)} | {state} | {self.seconds:.1f}s"
                + (f" | {warning}" if warning else ""))


class Auditor(Protocol):
    """Who audits committed batches: AuditBacklog (now, in the caller) or AuditFollower (a thread)."""

    def submit(self, committed_seq: int) -> None:
        """Audit every committed batch up to this one that is not audited yet (now, or soon)."""

    def audited_seq(self) -> int:
        """Every batch up to this one is audited: prune may delete their staging folders."""


def state_uri(config: LiverlConfig) -> str:
    return config.pipelines.state_uri or f"{config.table.trajectories_uri.rstrip('/')}/_liverl_distill"


def distill_once(config: LiverlConfig, now_ms: int | None = None,
                 on_phase: Callable[[str], None] = lambda phase: None, auditor: Auditor | None = None) -> BatchReport:
    """Distill everything new since the last commit; safe to re-run after a crash at any point.

    `auditor` (with config.pipelines.audit): None audits here, so the batch is audited when this returns."""
    began = time.monotonic()
    store = StateStore(state_uri(config))
    if config.pipelines.audit and auditor is None:
        from pipelines.audit import AuditBacklog

        auditor = AuditBacklog(config, store)
    committed = table.read_committed(config.table.trajectories_uri)
    if config.pipelines.audit:
        auditor.submit(committed.seq)  # batches committed by an earlier run and not audited yet
    seq = committed.seq + 1
    plan = store.load_plan(seq)
    if plan is None:
        plan = make_plan(config, committed, seq, now_ms)
        store.save_plan(plan)
    on_phase("planned")
    report = BatchReport(seq, plan.batch_id, committed=False, offsets=plan.offsets(),
                         table_version=committed.table_version)
    if not plan.has_news() and not store.count_staged(plan.carried_state, "pending"):
        store.drop_plan(seq)  # nothing new and nothing waiting: a fresh plan next time, with a fresh clock
        report.seconds = time.monotonic() - began
        return report
    store.reset_batch_dir(seq)
    report.counters, report.workers = run_pipeline(config, plan, store.batch_dir(seq))
    staged_pending = store.open_staged(store.batch_dir(seq), "pending", RAW_RECORD_SCHEMA)
    report.pending = pending_sessions(config.pipelines, plan.as_of_ms, report.counters.get("sessions_pending", 0),
                                      staged_pending.files, staged_pending.filesystem)
    on_phase("distilled")
    # Staged outputs are streamed into the commit; the driver reads only footers and id columns.
    rows = store.open_staged(store.batch_dir(seq), "trajectories", TRAJECTORY_SCHEMA)
    dead = store.open_staged(store.batch_dir(seq), "dead_letters", DEAD_LETTER_SCHEMA).plus(gap_dead_letters(plan))
    report.counters["retention_gap_records"] = (report.counters.get("retention_gap_records", 0)
                                                + sum(gap.records_lost for gap in plan.gaps))
    report.trajectories = rows.num_rows()
    ids = rows.columns("tenant_id", "session_id")
    report.sessions = len(set(zip(ids.column("tenant_id").to_pylist(), ids.column("session_id").to_pylist())))
    report.dead_letters = dict(Counter(dead.columns("reason").column("reason").to_pylist()))
    if not plan.has_news() and report.trajectories == 0 and not report.dead_letters:
        store.drop_plan(seq)  # pending sessions are still pending: committing would only churn versions
        report.seconds = time.monotonic() - began
        return report
    report.table_version = commit_batch(config, store, plan, rows, dead, report, on_phase)
    report.committed = True
    on_phase("after_commit")
    if config.pipelines.audit:
        auditor.submit(seq)
    store.prune(seq, config.pipelines.keep_state_batches, auditor.audited_seq() if config.pipelines.audit else None)
    report.seconds = time.monotonic() - began
    return report


def commit_batch(config: LiverlConfig, store: StateStore, plan: BatchPlan, rows: StagedOutput, dead: StagedOutput,
                 report: BatchReport, on_phase: Callable[[str], None]) -> int:
    """Dead letters, then trajectories with offsets and state pointer; returns the new table version."""
    on_phase("before_commit")
    if report.dead_letters:
        table.commit_dead_letters(config.table.dead_letters_uri, dead.reader(), plan.seq, plan.batch_id)
    on_phase("during_commit")
    return table.commit_trajectories(config.table.trajectories_uri, rows.reader(), plan.seq, {
        names.COMMIT_BATCH_ID: plan.batch_id,
        names.COMMIT_KAFKA_OFFSETS: json.dumps(plan.offsets(), sort_keys=True),
        table.COMMIT_DISTILL_STATE: store.batch_dir(plan.seq),
        table.COMMIT_DISTILL_SUMMARY: json.dumps(report.summary(), sort_keys=True),
        table.COMMIT_REWARD_CONFIG_VERSION: reward_version(config.rewards),  # the rows' version, custom rewards included
    })


def make_plan(config: LiverlConfig, committed: table.Committed, seq: int, now_ms: int | None) -> BatchPlan:
    """Ranges from the committed offsets to the high-water marks; retention gaps handled by on_retention_gap."""
    kafka = config.kafka
    starts = committed.next_starts()
    marks = high_water_marks(kafka.client_kwargs(), [kafka.session_events_topic, kafka.model_calls_topic], starts,
                             config.pipelines.read_timeout_s)
    earliest = earliest_offsets(kafka.client_kwargs(), list(marks))
    gaps = find_retention_gaps(starts, earliest, marks)
    record_gaps(gaps, config.pipelines.on_retention_gap)  # "fail": raises RetentionGapError, nothing planned
    return BatchPlan(seq=seq, batch_id=f"{config.pipelines.consumer_group}-{seq:08d}",
                     as_of_ms=int(time.time() * 1000) if now_ms is None else now_ms,
                     ranges=tuple(plan_ranges(marks, starts, earliest)), carried_state=committed.state_uri,
                     gaps=tuple(gaps))


def gap_dead_letters(plan: BatchPlan) -> pa.Table:
    """The plan's retention gaps as stamped dead-letter rows (a plan holds them, so a re-run records the same)."""
    from pipelines.job import stamp_dead_letter

    return pa.Table.from_pylist([stamp_dead_letter(gap.dead_letter(), plan.batch_id, plan.as_of_ms)
                                 for gap in plan.gaps], schema=DEAD_LETTER_SCHEMA)


def run_pipeline(config: LiverlConfig, plan: BatchPlan, staging_uri: str) -> tuple[dict[str, int], dict[str, int]]:
    """Run the batch's Beam graph to completion; returns its counters and the records each worker read."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.job import DistillBatch, stage_outputs
    from pipelines.kafka_source import WORKERS_NAMESPACE
    from pipelines.portability import check_shared_storage, ship_client_files

    settings = config.pipelines
    check_shared_storage(settings.runner, settings.beam_options, staging_uri)
    timing = Timing(as_of_ms=plan.as_of_ms, reward_horizon_ms=int(settings.reward_horizon_s * 1000),
                    idle_timeout_ms=int(settings.idle_timeout_s * 1000),
                    late_event_retention_ms=int(settings.late_event_retention_s * 1000))
    chunks = [chunk for r in plan.ranges for chunk in r.split(settings.read_chunk_records)]
    options = PipelineOptions([f"--runner={settings.runner}", *settings.beam_options])
    pipeline = beam.Pipeline(options=options)
    outputs = pipeline | "DistillBatch" >> DistillBatch(
        chunks, plan.carried_state, config.kafka.session_events_topic, config.kafka.model_calls_topic,
        ship_client_files(config.kafka.client_kwargs()), settings.read_timeout_s, timing, config.rewards, plan.batch_id,
        settings.on_retention_gap, trace_sample_rate=settings.trace_sample_rate if settings.audit else 0.0,
        keys_dir=str(config.privacy.keys_dir), seal_rows=config.privacy.encrypt_payloads)
    stage_outputs(outputs, staging_uri)
    result = pipeline.run()
    result.wait_until_finish()
    counters: Counter = Counter()
    workers: Counter = Counter()
    for item in result.metrics().query()["counters"]:
        value = item.committed if item.committed is not None else item.attempted
        metric = item.key.metric
        (workers if metric.namespace == WORKERS_NAMESPACE else counters)[metric.name] += int(value or 0)
    return dict(counters), dict(workers)
