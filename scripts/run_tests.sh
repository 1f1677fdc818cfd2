#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on CPU against the real embedded stack.
# Two parts: everything but the tests marked `serial` on two pytest-xdist workers that each take whole files
# (module fixtures start once; most tests wait on servers they started, so two overlap on two cores), then the
# `serial` tests alone, since they judge latency against their own steady state. --durations names the slowest.
# pytest's exit 5 ("no tests collected") is a failure only when neither part collected anything: a suite that ran
# nothing proves nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch-extensions}"
set +e
.venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=30 -m "not serial" "$@"
parallel=$?
.venv/bin/python -m pytest -p no:cacheprovider --durations=10 -m serial "$@"
serial=$?
set -e
if [ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ]; then
  echo "run_tests: pytest collected no tests; that is a failure" >&2
  exit 1
fi
for code in "$parallel" "$serial"; do
  if [ "$code" -ne 0 ] && [ "$code" -ne 5 ]; then
    exit "$code"
  fi
done
exit 0
