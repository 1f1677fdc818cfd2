"""What every benchmark shares: the environment it ran in, and one machine-readable summary.

Each benchmark prints `environment_line()` beside its ratios (these machines are noisy: a ratio means
little without the load it was measured under) and calls `record(name, figures)` once at the end.
`make bench` points LIVERL_BENCH_SUMMARY at one JSON file that collects every benchmark's figures;
the README's table and docs/capacity.md are built from it (scripts/capacity.py).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

SUMMARY_ENV = "LIVERL_BENCH_SUMMARY"


def environment() -> dict:
    load1, load5, load15 = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "load_average": [round(load1, 2), round(load5, 2), round(load15, 2)],
        "python": platform.python_version(),
        "machine": platform.machine(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def environment_line() -> str:
    env = environment()
    load = "/".join(f"{value:.2f}" for value in env["load_average"])
    return f"environment | {env['cores']} cores | load average {load} (1/5/15 min) | python {env['python']}"


def record(name: str, figures: dict, path: str | Path | None = None, measured_in: dict | None = None) -> Path | None:
    """Merge `figures` (JSON-able: medians, ratios, rounds) under `name` into the summary file, if one is set.
    measured_in: the environment() read before the timed work, for a benchmark whose own processes would
    load the machine by the time it records (default: read now)."""
    target = path or os.environ.get(SUMMARY_ENV)
    if not target:
        return None
    target = Path(target)
    summary = json.loads(target.read_text()) if target.exists() else {}
    summary[name] = {"environment": measured_in or environment(), **figures}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return target
