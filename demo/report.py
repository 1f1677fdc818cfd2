"""The demo's report: PNG plots and one HTML page, written to disk and logged to MLflow.

Plots: served reward by version and task family, freshness, staleness of the trained-on data,
throughput per stage, and the reward-hacking monitors per version.
"""

from __future__ import annotations

import html
import statistics
import time
from pathlib import Path

from demo.config import DemoLiverlConfig

MONITORS_SHOWN = ("rate.broken_tool_calls", "rate.clarifying", "rate.give_up", "mean.turns",
                  "mean.subagents_per_task", "mean.critical_steps")


def write_report(config: DemoLiverlConfig, traffic, verdict, fresh, lineage, say, heldout=None, tenants=None) -> Path:
    """heldout: the real model's demo.heldout.HeldoutComparison (base vs last served), written beside the plots.
    tenants: each tenant's own adapter against the shared policy (demo.tenant_comparison), in tenants.json and the page."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here
    out = config.stack.data_dir / "report" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    rows = _table_rows(config.table.trajectories_uri)
    figures = {
        "reward_by_version.png": _reward_by_version(traffic, verdict),
        "freshness.png": _freshness(fresh),
        "staleness.png": _staleness(rows),
        "throughput.png": _throughput(traffic, lineage, config.table.trajectories_uri),
        "monitors.png": _monitors(rows),
    }
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=90, bbox_inches="tight")
    page = out / "index.html"
    page.write_text(_html(verdict, fresh, traffic, figures, heldout, tenants))
    if heldout is not None:
        import json

        (out / "heldout.json").write_text(json.dumps(heldout.as_dict(), indent=1, sort_keys=True) + "\n")
    if tenants is not None:
        from demo.tenant_run import write_tenant_report

        write_tenant_report(out, tenants)
    _log_to_mlflow(config, out, verdict, fresh, say)
    say(f"      report: {page}")
    return out


def _table_rows(uri: str) -> list[dict]:
    from liverl.io.table_history import TableHistory

    return TableHistory(uri).rows_up_to(columns=["policy_versions", "signals", "reward_components", "critical_steps",
                                                 "task_family", "distilled_at_ms", "session_end_ms"])


def _figure(title: str):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.6))
    axes.set_title(title)
    return figure, axes


def _reward_by_version(traffic, verdict):
    figure, axes = _figure("served reward by policy version and task family")
    by_version = traffic.by_version()
    versions = list(by_version)
    families = sorted({s.family for s in traffic.sessions})
    for family in families:
        means = [statistics.fmean([s.reward for s in by_version[v] if s.family == family] or [float("nan")])
                 for v in versions]
        axes.plot(versions, means, marker="o", label=family, alpha=0.7)
    axes.plot(versions, [statistics.fmean(s.reward for s in by_version[v]) for v in versions], marker="s",
              color="black", linewidth=2.5, label="all")
    axes.set_xlabel("served version (order first served)")
    axes.set_ylabel("mean reward")
    axes.legend(fontsize=8)
    return figure


def _freshness(fresh):
    figure, axes = _figure(f"freshness: {fresh.describe()}")
    axes.hist(list(fresh.seconds.values()) or [0], bins=20, color="tab:green")
    axes.set_xlabel("seconds from session end to a served version trained on it")
    axes.set_ylabel("sessions")
    return figure


def _staleness(rows):
    """Per trajectory: how many versions behind the newest registered one its behaviour policy was."""
    figure, axes = _figure("staleness of captured trajectories (behaviour version)")
    versions = [int(r["policy_versions"][-1]) for r in rows if r["policy_versions"]
                and str(r["policy_versions"][-1]).isdigit()]
    if versions:
        axes.hist(versions, bins=range(min(versions), max(versions) + 2), color="tab:orange", align="left")
    axes.set_xlabel("policy version that produced the trajectory")
    axes.set_ylabel("trajectories")
    return figure


def _throughput(traffic, lineage, table_uri):
    figure, axes = _figure("throughput per stage (cumulative)")
    ends = sorted(s.ended_at for s in traffic.sessions)
    if ends:
        start = ends[0]
        axes.plot([t - start for t in ends], range(1, len(ends) + 1), label="sessions served + captured")
        commits = _commit_times(table_uri)
        if commits:
            axes.plot([t - start for t, _ in commits], [n for _, n in commits], label="trajectories committed")
        created = sorted(l.created_ms / 1000 for l in lineage.values())
        axes.step([t - start for t in created], range(1, len(created) + 1), where="post",
                  label="versions registered (x1)")
    axes.set_xlabel("seconds")
    axes.set_yscale("symlog")
    axes.legend(fontsize=8)
    return figure


def _commit_times(table_uri: str) -> list[tuple[float, int]]:
    """(commit time in s, rows committed so far) per table version."""
    from liverl.io.table_history import TableHistory

    total, points = 0, []
    for commit in TableHistory(table_uri).commits_after(-1):
        total += commit.added_rows or 0
        points.append((commit.timestamp_ms / 1000, total))
    return points


def _monitors(rows):
    from liverl.rewards.monitors import version_monitors

    figure, axes = _figure("reward-hacking monitors by policy version")
    figures = version_monitors(rows) if rows else {}
    versions = sorted(figures, key=lambda v: int(v) if v.isdigit() else 10**9)
    for name in MONITORS_SHOWN:
        values = [figures[v].get(name, float("nan")) for v in versions]
        axes.plot(versions, values, marker=".", label=name)
    axes.set_xlabel("policy version")
    axes.legend(fontsize=7)
    return figure


def _html(verdict, fresh, traffic, figures, heldout=None, tenants=None) -> str:
    held = "" if heldout is None else "<h2>held-out real tasks</h2><pre>" + html.escape("\n".join(heldout.lines())) + "</pre>"
    if tenants is not None:
        held += ("<h2>per tenant: own adapter vs the shared policy on the same tenant's traffic</h2><pre>"
                 + html.escape("\n".join(c.line() for c in tenants)) + "</pre>")
    families = "".join(f"<li>{html.escape(k)}: {v:.3f}</li>" for k, v in traffic.mean_reward_by_family().items())
    images = "".join(f'<h3>{html.escape(name[:-4].replace("_", " "))}</h3><img src="{name}">' for name in figures)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>liverl demo report</title></head><body>"
            f"<h1>liverl demo report</h1><p>{html.escape(verdict.describe())}</p>"
            f"<p>freshness: {html.escape(fresh.describe())}; by leg (medians): "
            f"{html.escape(fresh.describe_legs() or '-')}</p>"
            f"<p>sessions: {len(traffic.sessions)}; mean reward by family:"
            f"</p><ul>{families}</ul>{held}{images}</body></html>")


def _log_to_mlflow(config: DemoLiverlConfig, out: Path, verdict, fresh, say) -> None:
    from liverl.io.tracking import Tracking

    with Tracking(config.mlflow.tracking_uri).run(config.mlflow.demo_experiment, "demo-report") as run:
        run.log_metrics({"swaps": verdict.swaps, "reward_slope": verdict.slope,
                         "freshness_median_s": fresh.median() if fresh.seconds else -1,
                         "freshness_p95_s": fresh.p95() if fresh.seconds else -1,
                         **{f"freshness_{leg}_median_s": seconds for leg, seconds in fresh.leg_medians().items()}})
        run.log_step_metrics([(int(version) if version.isdigit() else 0, {"served_reward": mean})
                              for version, mean in verdict.mean_reward.items()])
        run.set_tag("liverl.demo.verdict", verdict.describe())
        run.log_artifacts(out, artifact_path="report")
