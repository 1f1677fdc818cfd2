"""Regenerate the capacity table of docs/capacity.md from the benchmarks' JSON summary.

    .venv/bin/python scripts/capacity.py [--summary reports/bench-summary.json] [--write docs/capacity.md]
        [--sessions-per-s 100,1000,10000] [--events-per-session 20] [--model-calls-per-session 8]
        [--tokens-per-call 1800] [--model-params 1.5e9] ...

Every per-unit throughput is taken from the summary when the benchmark that measures it has run; where it
has not, or where this machine cannot measure it (an N-parameter model on accelerators), a documented
default is used and the table says so in its "source" column. Nothing here is a measurement of its own.
Without --write the page's generated block is printed; with it, the block between the markers is replaced.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from generated_block import replace_block  # scripts/, beside this file

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- capacity:begin (scripts/capacity.py) -->", "<!-- capacity:end -->"

# Defaults used only when the summary lacks a figure; each is named in the table where it is used.
DEFAULT_CAPTURE_EVENTS_PER_S = 2000.0  # per replica process; assumed, about what one Python process acknowledges
# Per Beam worker core: ~6k records/s through Sessions+GroupByKey were measured on 2 cores, halved.
DEFAULT_PIPELINE_RECORDS_PER_S = 3000.0
DEFAULT_PARTITION_RECORDS_PER_S = 5000.0  # per Kafka partition; a conservative figure for a real cluster
DEFAULT_REPLICA_EFFICIENCY = 0.8  # share of one replica's rate kept per replica once (R-1)/R of events hop
ACCELERATOR_PEAK_FLOPS = 989e12  # bf16 dense, one H100-class accelerator
TRAIN_MFU, SERVE_MFU = 0.35, 0.25  # model FLOPs utilisation assumed for training and for batched serving


@dataclass
class Figure:
    value: float
    source: str  # "measured: <bench key>" or "default: <why>"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", type=Path, default=REPO / "reports" / "bench-summary.json")
    parser.add_argument("--write", type=Path, default=None, help="the page whose generated block to replace")
    parser.add_argument("--sessions-per-s", default="100,1000,10000")
    parser.add_argument("--events-per-session", type=int, default=20, help="SessionEvents (SDK) per session")
    parser.add_argument("--model-calls-per-session", type=int, default=8)
    parser.add_argument("--tokens-per-call", type=int, default=1800, help="prompt + completion tokens of one call")
    parser.add_argument("--completion-tokens-per-call", type=int, default=300)
    parser.add_argument("--model-params", type=float, default=1.5e9)
    parser.add_argument("--trained-share", type=float, default=1.0, help="share of sessions that become trajectories")
    parser.add_argument("--utilisation", type=float, default=0.6, help="target load per unit (headroom for peaks)")
    parser.add_argument("--step-tokens", type=float, default=2e6, help="trained tokens per optimizer step")
    parser.add_argument("--steps-per-version", type=int, default=4, help="trainer.steps_per_version")
    parser.add_argument("--distill-interval-s", type=float, default=10.0, help="pipelines.follow_interval_s")
    parser.add_argument("--publish-s", type=float, default=120.0,
                        help="export + register + gate + hot-swap of one version (default: assumed)")
    return parser.parse_args(argv)


def per_unit_figures(summary: dict, args) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    replicas = summary.get("ingest_replicas")
    capture = summary.get("capture")
    if replicas:
        figures["capture"] = Figure(replicas["one_replica_events_per_s"],
                                    f"measured: ingest_replicas (1 replica){load(replicas)}")
        cores = replicas.get("environment", {}).get("cores") or 0
        if cores >= 6:  # two replicas, broker and client each had a core: the ratio is the hop's cost
            figures["replica_efficiency"] = Figure(min(1.0, replicas["ratio"] / 2), "measured: ingest_replicas ratio / 2")
        else:
            figures["replica_efficiency"] = Figure(
                DEFAULT_REPLICA_EFFICIENCY, f"default: measured ratio {replicas['ratio']:.2f} on {cores} cores "
                                            "shared by 2 replicas, broker and client says little about the hop")
    elif capture:
        figures["capture"] = Figure(capture["sdk_events_per_s"], f"measured: capture (SDK + 1 service){load(capture)}")
    else:
        figures["capture"] = Figure(DEFAULT_CAPTURE_EVENTS_PER_S, "default: no capture benchmark in the summary")
    figures.setdefault("replica_efficiency", Figure(DEFAULT_REPLICA_EFFICIENCY, "default: no ingest_replicas run"))
    figures["pipeline"] = pipeline_figure(summary.get("pipelines"))
    figures["partition"] = Figure(DEFAULT_PARTITION_RECORDS_PER_S, "default: the embedded broker is not a cluster")
    train_flops, serve_flops = 6 * args.model_params, 2 * args.model_params
    figures["trainer"] = Figure(TRAIN_MFU * ACCELERATOR_PEAK_FLOPS / train_flops,
                                f"default: 6N FLOPs/token at {TRAIN_MFU:.0%} of {ACCELERATOR_PEAK_FLOPS:.3g} FLOP/s")
    figures["serving"] = Figure(SERVE_MFU * ACCELERATOR_PEAK_FLOPS / serve_flops,
                                f"default: 2N FLOPs/token at {SERVE_MFU:.0%} of {ACCELERATOR_PEAK_FLOPS:.3g} FLOP/s")
    return figures


def pipeline_figure(pipelines: dict | None) -> Figure:
    """Records/s per Beam worker: the best distributed path measured, divided by its workers."""
    if not pipelines:
        return Figure(DEFAULT_PIPELINE_RECORDS_PER_S, "default: no pipelines benchmark in the summary")
    medians, workers = pipelines.get("medians", {}), max(1, int(pipelines.get("workers", 1)))
    for path in ("portable", "multiprocess", "multi_processing", "direct"):
        if path in medians:
            return Figure(medians[path]["events_per_s"] / workers,
                          f"measured: pipelines {path} / {workers} workers{load(pipelines)}")
    return Figure(DEFAULT_PIPELINE_RECORDS_PER_S, "default: the pipelines entry has no Beam path")


def load(entry: dict) -> str:
    """The load the figure was measured under: on a shared machine, a per-process rate is a lower bound."""
    env = entry.get("environment", {})
    if not env.get("load_average"):
        return ""
    return f", on {env.get('cores')} cores at load average {env['load_average'][0]:g} (a lower bound)"


def size(rate: float, figures: dict[str, Figure], args) -> dict[str, object]:
    """Units per stage for one traffic level, and what bounds freshness there."""
    u = args.utilisation
    events = rate * args.events_per_session
    calls = rate * args.model_calls_per_session
    records = events + calls  # both topics feed the distiller
    served_tokens = calls * args.tokens_per_call
    trained_tokens = calls * args.tokens_per_call * args.trained_share
    capture_one = figures["capture"].value
    replicas = max(1, math.ceil(events / (capture_one * u)))
    if replicas > 1:  # (R-1)/R of the events take one more hop
        replicas = math.ceil(events / (capture_one * figures["replica_efficiency"].value * u))
    workers = max(1, math.ceil(records / (figures["pipeline"].value * u)))
    partitions = 2 ** math.ceil(math.log2(max(workers, records / (figures["partition"].value * u), 1)))
    ranks = max(1, math.ceil(trained_tokens / (figures["trainer"].value * u)))
    serving = max(1, math.ceil(served_tokens / (figures["serving"].value * u)))
    fill_s = args.step_tokens * args.steps_per_version / trained_tokens  # time for traffic to fill a version
    step_s = args.step_tokens / (figures["trainer"].value * ranks)
    terms = {"waiting for traffic to fill a version": fill_s,
             "training a version": step_s * args.steps_per_version,
             "publishing (export, register, gate, swap)": args.publish_s,
             "the distiller's batch interval": args.distill_interval_s}
    bound = max(terms, key=terms.get)
    freshness = args.distill_interval_s + max(fill_s, step_s * args.steps_per_version) + args.publish_s
    return {"sessions/s": rate, "events/s": events, "records/s": records, "capture replicas": replicas,
            "partitions": partitions, "Beam workers": workers, "trainer ranks": ranks, "serving replicas": serving,
            "freshness": freshness, "bound": bound}


def render(figures: dict[str, Figure], rows: list[dict], args, summary_path: Path) -> str:
    def n(value: float) -> str:
        return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"

    lines = [BEGIN, "",
             f"Generated by `.venv/bin/python scripts/capacity.py --write docs/capacity.md` from "
             f"`{summary_path.relative_to(REPO) if summary_path.is_relative_to(REPO) else summary_path}`.", "",
             f"Product: {args.events_per_session} events, {args.model_calls_per_session} model calls of "
             f"{args.tokens_per_call} tokens ({args.completion_tokens_per_call} generated) per session; model "
             f"{args.model_params:.3g} parameters; every unit planned at {args.utilisation:.0%} load; "
             f"{args.trained_share:.0%} of sessions trained on; a version every {args.steps_per_version} steps of "
             f"{args.step_tokens:.3g} tokens.", "",
             "| per unit | throughput | source |", "|---|---|---|",
             f"| capture replica (one process, ~1 core) | {n(figures['capture'].value)} events/s | {figures['capture'].source} |",
             f"| capture replica kept with 2+ replicas | {figures['replica_efficiency'].value:.2f} x | {figures['replica_efficiency'].source} |",
             f"| Beam worker (one core) | {n(figures['pipeline'].value)} records/s | {figures['pipeline'].source} |",
             f"| Kafka partition | {n(figures['partition'].value)} records/s | {figures['partition'].source} |",
             f"| trainer rank (one accelerator) | {n(figures['trainer'].value)} tokens/s | {figures['trainer'].source} |",
             f"| serving replica (one accelerator) | {n(figures['serving'].value)} tokens/s | {figures['serving'].source} |",
             "", "| sessions/s | events/s | records/s | capture replicas | partitions | Beam workers | trainer ranks "
             "| serving replicas | freshness (s) | bounded by |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join(n(row[k]) if isinstance(row[k], (int, float)) else str(row[k]) for k in (
            "sessions/s", "events/s", "records/s", "capture replicas", "partitions", "Beam workers", "trainer ranks",
            "serving replicas", "freshness", "bound")) + " |")
    lines += ["", END]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    summary = json.loads(args.summary.read_text()) if args.summary.exists() else {}
    if not summary:
        print(f"{args.summary} is missing or empty: every figure below is a default (run `make bench` first)",
              file=sys.stderr)
    figures = per_unit_figures(summary, args)
    rows = [size(float(rate), figures, args) for rate in args.sessions_per_s.split(",")]
    block = render(figures, rows, args, args.summary)
    if args.write is None:
        print(block)
        return 0
    replace_block(args.write, BEGIN, END, block)
    print(f"wrote the capacity table into {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
