#!/usr/bin/env bash
# Every stage's benchmark, one after the other (each prints its own ratios against a plain baseline).
# Benchmarks are not tests: they time nothing against a threshold and never fail on a slow machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch-extensions}"
for bench in bench/*_bench.py; do
  echo "=== $bench"
  .venv/bin/python "$bench"
done
