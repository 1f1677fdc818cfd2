#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on CPU against the real embedded stack.
# pytest's exit 5 ("no tests collected") is a failure here: a suite that ran nothing proves nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch-extensions}"
set +e
# Two workers, whole files each (module fixtures start once): most tests wait on servers they started, so two
# overlap on two cores. --durations names the slowest tests in every log.
.venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=30 "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "run_tests: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$code"
