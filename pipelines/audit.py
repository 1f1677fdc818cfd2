"""MLflow audit: one run per committed batch, so a person can see what the policy is learning from.

Each run (experiment mlflow.audit_experiment, run name = batch id, tag liverl.batch_id) holds the batch's
counts and dead-letter reasons as metrics, its Kafka offsets, the distribution of every raw reward
component (mean/min/max metrics and a histogram figure) and a browsable sample of trajectories
(`trajectories_sample.json`, an MLflow table). Everything is read back from the committed Delta version,
so the audit shows exactly what the trainer will read; a batch whose process died before auditing is
audited by the next run.

Before the run, the batch's sampled trajectories are written as MLflow traces in the same experiment
(pipelines/traces.py); the run comes last, so a batch with its run has all its traces. The run's tag
`liverl.traces_filter` is the search expression of its traces.
"""

from __future__ import annotations

import json

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.io.lineage import decode_offsets
from liverl.io.table_history import TableHistory
from liverl.io.traces import traces_filter
from liverl.io.tracking import Tracking
from pipelines import table
from pipelines.traces import log_batch_traces

BATCH_TAG = names.COMMIT_BATCH_ID
TRACES_FILTER_TAG = "liverl.traces_filter"


def ensure_audited(config: LiverlConfig, committed: table.Committed) -> str | None:
    """The audit run id of the last committed batch, logging the run first if it is missing."""
    batch_id = committed.metadata.get(names.COMMIT_BATCH_ID)
    if not batch_id:
        return None
    tracking = Tracking(config.mlflow.tracking_uri)
    found = tracking.find_run(config.mlflow.audit_experiment, BATCH_TAG, batch_id)
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
        run.log_params({"batch_id": batch_id, "batch_seq": committed.seq, "table_version": committed.table_version,
                        "reward_config_version": metadata.get(table.COMMIT_REWARD_CONFIG_VERSION, ""),
                        "kafka_offsets": json.dumps(offsets, sort_keys=True)[:6000]})
        metrics = {"sessions": summary.get("sessions", 0), "trajectories": len(rows),
                   "trainable_tokens": sum(sum(r["loss_mask"]) for r in rows),
                   "tokens": sum(len(r["token_ids"]) for r in rows), "traces": traces}
        metrics |= {name: value for name, value in summary.items() if isinstance(value, int | float)}
        metrics |= {f"dead_letters.{reason}": n for reason, n in summary.get("dead_letters", {}).items()}
        metrics["dead_letters"] = sum(summary.get("dead_letters", {}).values())
        metrics |= reward_statistics(rows)
        run.log_metrics({k: float(v) for k, v in metrics.items()})
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
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, len(components), figsize=(3 * len(components), 2.5), squeeze=False)
    for axis, (name, values) in zip(axes[0], sorted(components.items())):
        axis.hist(values, bins=20)
        axis.set_title(name, fontsize=8)
    figure.tight_layout()
    plt.close(figure)
    return figure


def sample_table(rows: list[dict], size: int) -> dict[str, list]:
    """Columns of a browsable sample: who, how long, how much was trainable, and the raw rewards."""
    sample = sorted(rows, key=lambda r: r["trajectory_id"])[:size]
    return {
        "session_id": [r["session_id"] for r in sample],
        "agent": [f"{r['agent_role']}:{r['agent_id']}" + (f" <- {r['parent_agent_id']}" if r["parent_agent_id"] else "")
                  for r in sample],
        "task": [f"{r['task_family']}/{r['task_id']}" for r in sample],
        "policy_versions": [",".join(r["policy_versions"] or []) for r in sample],
        "tokens": [len(r["token_ids"]) for r in sample],
        "trainable_tokens": [sum(r["loss_mask"]) for r in sample],
        "segments": [len(r["segment_starts"] or []) for r in sample],
        "reward_components": [json.dumps(dict(r["reward_components"] or ()), sort_keys=True) for r in sample],
        "signals": [json.dumps(dict(r["signals"] or ()), sort_keys=True) for r in sample],
        "critical_steps": [r["critical_steps"] for r in sample],
        "token_ids_head": [" ".join(map(str, r["token_ids"][:64])) for r in sample],
    }
