#!/usr/bin/env bash
# Every stage's benchmark, one after the other (each prints its own ratios against a plain baseline and the
# environment it ran in). Benchmarks are not tests: they time nothing against a threshold and never fail on a
# slow machine. Their figures are collected in one JSON summary (reports/bench-summary.json by default).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch-extensions}"
export LIVERL_BENCH_SUMMARY="${LIVERL_BENCH_SUMMARY:-$PWD/reports/bench-summary.json}"
for bench in bench/*_bench.py; do
  echo "=== $bench"
  .venv/bin/python "$bench"
done
echo "=== bench/api_layer_bench.py at an engine's rate"  # the API floor the serving bench's requests pay
.venv/bin/python bench/api_layer_bench.py --calls 600 --answer-ms 120
echo "summary: $LIVERL_BENCH_SUMMARY"
# The overhead table of docs/measurements.md, from that summary (`--write docs/measurements.md` puts it there).
.venv/bin/python scripts/overhead_table.py --summary "$LIVERL_BENCH_SUMMARY"
