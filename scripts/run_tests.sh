#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on CPU against the real embedded stack.
# pytest's exit 5 ("no tests collected") is a failure here: a suite that ran nothing proves nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch-extensions}"
set +e
.venv/bin/python -m pytest -p no:cacheprovider --durations=20 "$@"  # the slowest tests, in every log
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "run_tests: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$code"
