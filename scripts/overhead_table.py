"""Build the overhead table of docs/measurements.md (each stage against its plain baseline) from the benchmarks'
JSON summary.

    .venv/bin/python scripts/overhead_table.py [--summary reports/bench-summary.json] [--write docs/measurements.md]

One row per goal: what liverl's path achieves against its plain baseline (medians of the benchmark's
rounds, as the benchmark recorded them), the goal, and the environment it ran in (cores, 1-minute load
average, time). A benchmark absent from the summary shows as "not in the summary", never as a guess.
Without --write the block is printed; with it, the block between the markers in that page is replaced.
`make bench` prints it after the benchmarks (scripts/run_benches.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generated_block import replace_block  # scripts/, beside this file

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- overheads:begin (scripts/overhead_table.py) -->", "<!-- overheads:end -->"


@dataclass(frozen=True)
class Goal:
    stage: str
    bench: str  # the summary's key, as the benchmark records it
    measure: Callable[[dict], str]  # the figure, from that benchmark's entry
    goal: str


def _ratio(*keys: str) -> Callable[[dict], str]:
    def measure(entry: dict) -> str:
        value = entry
        for key in keys:
            value = value[key]
        return f"{value:.2f}x"
    return measure


def _layer(entry: dict, api: str) -> str:
    medians = entry["medians"]
    return (f"{medians[f'{api}-liverl']['server_cpu_us']:.0f} / {medians[f'{api}-bare']['server_cpu_us']:.0f} us; "
            f"{medians[f'{api}-liverl']['client_cpu_us']:.0f} us")


GOALS = [
    Goal("capture: SDK + capture service vs a plain producer, events/s", "capture", _ratio("ratio"), ">= 0.8x"),
    Goal("SDK overhead on the caller, p99", "capture", lambda e: f"{e['caller_p99_us']:.0f} us", "<= 50 us"),
    Goal("serving gRPC vs direct engine calls, requests/s", "serving", _ratio("ratios", "grpc_vs_direct"), ">= 0.95x"),
    Goal("serving OpenAI HTTP vs direct engine calls, requests/s", "serving", _ratio("ratios", "http_vs_direct"),
         ">= 0.9x"),
    Goal("serving with ModelCall recording on vs off", "serving", _ratio("ratios", "recording_on_vs_off"),
         ">= 0.97x"),
    Goal("the same, switched every second within one gRPC load", "serving",
         _ratio("ratios", "recording_on_vs_off_interleaved"), ">= 0.97x"),
    Goal("recording lag (completion -> Kafka ack), p50 / p99", "serving",
         lambda e: f"{e['recording_lag']['p50_ms']:.0f} / {e['recording_lag']['p99_ms']:.0f} ms", "(reported)"),
    Goal("gRPC layer: server CPU per call, liverl / bare grpc.aio", "api_layer",
         lambda e: f"{e['medians']['grpc-liverl']['server_cpu_us']:.0f} / "
                   f"{e['medians']['grpc-bare']['server_cpu_us']:.0f} us", "(reported)"),
    Goal("HTTP layer: server CPU per call, liverl / bare uvicorn", "api_layer",
         lambda e: f"{e['medians']['http-liverl']['server_cpu_us']:.0f} / "
                   f"{e['medians']['http-bare']['server_cpu_us']:.0f} us", "(reported)"),
    Goal("gRPC layer at an engine's rate (answer after 120 ms): server CPU per call, liverl / bare; client",
         "api_layer_answer_120ms", lambda e: _layer(e, "grpc"), "(reported)"),
    Goal("HTTP layer at an engine's rate (answer after 120 ms): server CPU per call, liverl / bare; client",
         "api_layer_answer_120ms", lambda e: _layer(e, "http"), "(reported)"),
    Goal("trainer: useful (non-padding) tokens / computed tokens, packed", "trainer",
         lambda e: f"{e['useful_share']['packed']:.2f} (padded {e['useful_share']['padded']:.2f})", ">= 0.9"),
]


def environment(entry: dict) -> str:
    env = entry.get("environment", {})
    load = env.get("load_average") or ["?"]
    return f"{env.get('cores', '?')} cores, load {load[0]}, {env.get('at', '?')}"


def render(summary: dict, source: Path) -> str:
    lines = [BEGIN, "", f"Built from `{source.name}` by `scripts/overhead_table.py` (medians of each benchmark's "
             "rounds; the load is the 1-minute average when the benchmark recorded its figures).", "",
             "| stage | measured | goal | environment |", "|---|---|---|---|"]
    for goal in GOALS:
        entry = summary.get(goal.bench)
        try:
            measured, env = (goal.measure(entry), environment(entry)) if entry else ("not in the summary", "")
        except (KeyError, TypeError):
            measured, env = f"not recorded by `{goal.bench}`", environment(entry)
        lines.append(f"| {goal.stage} | {measured} | {goal.goal} | {env} |")
    return "\n".join([*lines, "", END])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", type=Path, default=REPO / "reports" / "bench-summary.json")
    parser.add_argument("--write", type=Path, default=None, help="the page whose generated block to replace")
    args = parser.parse_args(argv)
    summary = json.loads(args.summary.read_text()) if args.summary.exists() else {}
    if not summary:
        print(f"{args.summary} is missing or empty: run `make bench` first", file=sys.stderr)
    block = render(summary, args.summary)
    if args.write is None:
        print(block)
        return 0
    replace_block(args.write, BEGIN, END, block)
    print(f"wrote the overhead table into {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
