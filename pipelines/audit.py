"""MLflow audit: one run per committed batch, so a person can see what the policy is learning from.

Each run (experiment mlflow.audit_experiment, run name = batch id, tag liverl.batch_id) holds the batch's
counts and dead-letter reasons as metrics, its Kafka offsets, the distribution of every raw reward
component (mean/min/max metrics and a histogram figure) and a browsable sample of trajectories
(`trajectories_sample.json`, an MLflow table whose rows carry tenant_id and session_id, so that `liverl forget`
can drop a subject's: liverl/privacy/erase_audit.py). Nothing else in the run names a session, task or user:
params, metrics and batch.json are counts and offsets, the figure a histogram. Everything is read back from
the committed Delta version, so the audit shows exactly what the trainer will read; a batch whose process
died before auditing is audited by the next run.

Before the run, the batch's sampled trajectories are written as MLflow traces in the same experiment
(pipelines/traces.py); the run comes last, so a batch with its run has all its traces. The run's tag
`liverl.traces_filter` is the search expression of its traces.

`AuditBacklog` audits the committed batches not audited yet, oldest first: after a crash or an MLflow
outage that is every committed batch from the oldest staging folder on (prune keeps a batch's folder until
its audit is done, so older batches were audited). distill_once runs it before returning; `liverl distill
--follow` runs it on a background thread (pipelines/audit_follower.py) so the next batch does not wait.
Only a FINISHED run counts: a run cut short (process killed mid-audit) is deleted and logged again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.io.lineage import decode_offsets
from liverl.io.table_history import TableHistory
from liverl.io.traces import traces_filter
from liverl.io.tracking import Tracking
from pipelines import table
from pipelines.state import StateStore
from pipelines.traces import log_batch_traces

BATCH_TAG = names.COMMIT_BATCH_ID
TRACES_FILTER_TAG = "liverl.traces_filter"


class AuditBacklog:
    """Audits committed batches oldest first, each once, and remembers how far it got (what prune may delete).

    Not thread-safe by itself: one caller at a time (distill_once, or the follower's thread)."""

    def __init__(self, config: LiverlConfig, store: StateStore,
                 audit_batch: Callable[[table.Committed], object] | None = None):
        self.config = config
        self.store = store
        self.audit_batch = audit_batch or (lambda batch: ensure_audited(config, batch))
        self.through: int | None = None  # every batch up to it is audited; None: not looked yet

    def submit(self, committed_seq: int) -> None:
        """distill_once's `auditor`: audit now, before returning."""
        self.audit_through(committed_seq)

    def audited_seq(self) -> int:
        return self.through or 0

    def audit_through(self, seq: int, stopping: Callable[[], bool] = lambda: False) -> None:
        """Audit every unaudited committed batch up to `seq`, oldest first; raises on the first failure
        (the batches before it stay audited: the next call resumes there)."""
        if seq <= 0:
            return
        if self.through is None:  # after a (re)start: from the oldest batch that still has its folder
            self.through = min([s for s in self.store.staged_seqs() if s <= seq] + [seq]) - 1
        for batch in committed_batches(self.config.table.trajectories_uri, self.through, seq):
            if stopping():
                return
            self.audit_batch(batch)
            self.through = batch.seq
        self.through = max(self.through, seq)


def committed_batches(trajectories_uri: str, after_seq: int, through_seq: int) -> list[table.Committed]:
    """Batches after_seq < seq <= through_seq as committed, each with its own table version, oldest first.

    From the Delta history (the commit metadata holds the batch seq, id, staging folder and summary the
    audit shows; TableHistory's TableCommit keeps only the id and offsets)."""
    from deltalake import DeltaTable

    wanted = through_seq - after_seq
    if wanted <= 0 or not DeltaTable.is_deltatable(trajectories_uri):
        return []
    history = DeltaTable(trajectories_uri)
    found: dict[int, table.Committed] = {}
    for limit in (wanted + 20, None):  # a batch is one version; other writers (optimize, vacuum) add a few
        for entry in history.history(limit):
            seq = int(entry.get(table.COMMIT_BATCH_SEQ) or 0)
            if after_seq < seq <= through_seq:
                found[seq] = table.Committed(seq, int(entry["version"]), entry)
        if len(found) == wanted:
            break
    return [found[seq] for seq in sorted(found)]


def ensure_audited(config: LiverlConfig, committed: table.Committed, tracking: Tracking | None = None) -> str | None:
    """The audit run id of a committed batch, logging the run first if it is missing."""
    batch_id = committed.metadata.get(names.COMMIT_BATCH_ID)
    if not batch_id:
        return None
    tracking = tracking or Tracking(config.mlflow.tracking_uri)
    found = tracking.find_finished_run(config.mlflow.audit_experiment, BATCH_TAG, batch_id)
    return found or log_batch(config, committed, batch_id, tracking)


def log_batch(config: LiverlConfig, committed: table.Committed, batch_id: str,
              tracking: Tracking | None = None) -> str:
    tracking = tracking or Tracking(config.mlflow.tracking_uri)
    metadata = committed.metadata
    rows = TableHistory(config.table.trajectories_uri).batch_rows(batch_id)
    summary = json.loads(metadata.get(table.COMMIT_DISTILL_SUMMARY, "{}"))
    offsets = decode_offsets(metadata.get(names.COMMIT_KAFKA_OFFSETS), f"commit metadata of batch {batch_id}")
    traces = log_batch_traces(config, committed.state_uri, rows, committed.table_version, tracking)
    tags = {BATCH_TAG: batch_id, TRACES_FILTER_TAG: traces_filter(batch_id=batch_id)}
    with tracking.run(config.mlflow.audit_experiment, batch_id, tags=tags) as run:
        params = {"batch_id": batch_id, "batch_seq": committed.seq, "table_version": committed.table_version,
                  "reward_config_version": metadata.get(table.COMMIT_REWARD_CONFIG_VERSION, ""),
                  "kafka_offsets": json.dumps(offsets, sort_keys=True)[:6000]}
        metrics = {"sessions": summary.get("sessions", 0), "trajectories": len(rows),
                   "trainable_tokens": sum(sum(r["loss_mask"]) for r in rows),
                   "tokens": sum(len(r["loss_mask"]) for r in rows), "traces": traces}
        metrics |= {name: value for name, value in summary.items() if isinstance(value, int | float)}
        metrics |= {f"dead_letters.{reason}": n for reason, n in summary.get("dead_letters", {}).items()}
        metrics["dead_letters"] = sum(summary.get("dead_letters", {}).values())
        metrics |= reward_statistics(rows)
        run.log_params_and_metrics(params, metrics)
        run.log_dict({"offsets": offsets, "summary": summary}, "batch.json")
        figure = reward_histograms(rows)
        if figure is not None:
            run.log_figure(figure, "reward_components.png")
        if rows:
            run.log_table(sample_table(rows, config.pipelines.audit_sample_size), "trajectories_sample.json")
        return run.run_id


def _components(rows: list[dict]) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row["reward_components"] or ():
            values.setdefault(name, []).append(value)
    return values


def reward_statistics(rows: list[dict]) -> dict[str, float]:
    stats = {}
    for name, values in _components(rows).items():
        key = "reward." + name.replace(" ", "_")
        stats |= {f"{key}.mean": sum(values) / len(values), f"{key}.min": min(values), f"{key}.max": max(values),
                  f"{key}.count": len(values)}
    return stats


def reward_histograms(rows: list[dict]):
    components = _components(rows)
    if not components:
        return None
    from matplotlib.figure import Figure  # not pyplot: no global state, safe on the follower's thread

    figure = Figure(figsize=(3 * len(components), 2.5))
    axes = figure.subplots(1, len(components), squeeze=False)
    for axis, (name, values) in zip(axes[0], sorted(components.items())):
        axis.hist(values, bins=20)
        axis.set_title(name, fontsize=8)
    figure.tight_layout()
    return figure


def sample_table(rows: list[dict], size: int) -> dict[str, list]:
    """Columns of a browsable sample: who, how long, how much was trainable, and the raw rewards. No token ids:
    they are the users' text, exact (the traces show it redacted). Every row carries its tenant_id and
    session_id, as the table does: `liverl forget` drops a subject's rows by them (liverl/privacy/erase_audit.py),
    so an id of the row is in a column of its own row, never in a figure or a text beside the table."""
    sample = sorted(rows, key=lambda r: r["trajectory_id"])[:size]
    return {
        "tenant_id": [r["tenant_id"] for r in sample],
        "session_id": [r["session_id"] for r in sample],
        "agent": [f"{r['agent_role']}:{r['agent_id']}" + (f" <- {r['parent_agent_id']}" if r["parent_agent_id"] else "")
                  for r in sample],
        "task": [f"{r['task_family']}/{r['task_id']}" for r in sample],
        "policy_versions": [",".join(r["policy_versions"] or []) for r in sample],
        "tokens": [len(r["loss_mask"]) for r in sample],  # one mask entry per token: the ids stay sealed
        "trainable_tokens": [sum(r["loss_mask"]) for r in sample],
        "segments": [len(r["segment_starts"] or []) for r in sample],
        "reward_components": [json.dumps(dict(r["reward_components"] or ()), sort_keys=True) for r in sample],
        "signals": [json.dumps(dict(r["signals"] or ()), sort_keys=True) for r in sample],
        "critical_steps": [r["critical_steps"] for r in sample],
    }
