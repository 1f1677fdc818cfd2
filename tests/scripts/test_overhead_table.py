"""scripts/overhead_table.py: the README's overhead table comes from the benchmarks' summary, and says so when
a benchmark is missing instead of guessing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table():
    sys.path.insert(0, str(REPO / "scripts"))  # as when it runs as a script: its helpers lie beside it
    spec = importlib.util.spec_from_file_location("overhead_table", REPO / "scripts" / "overhead_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


ENV = {"cores": 2, "load_average": [1.5, 1.2, 1.0], "at": "2026-12-01T22:00:00Z"}
SUMMARY = {
    "capture": {"environment": ENV, "ratio": 0.8123, "caller_p99_us": 48.4},
    "serving": {"environment": ENV, "ratios": {"grpc_vs_direct": 0.9, "http_vs_direct": 0.85,
                                                "recording_on_vs_off": 1.01,
                                                "recording_on_vs_off_interleaved": 0.978},
                "recording_lag": {"p50_ms": 12.3, "p99_ms": 1500.0}},
    "trainer": {"environment": ENV, "useful_share": {"packed": 0.96, "padded": 0.61}},
    "api_layer_answer_120ms": {"environment": ENV, "medians": {
        "grpc-bare": {"server_cpu_us": 850.0, "client_cpu_us": 0.0},
        "grpc-liverl": {"server_cpu_us": 1166.7, "client_cpu_us": 585.5},
        "http-bare": {"server_cpu_us": 433.3, "client_cpu_us": 0.0},
        "http-liverl": {"server_cpu_us": 933.3, "client_cpu_us": 649.5}}},
}


def test_every_goal_is_a_row_with_the_figure_its_benchmark_recorded(table):
    block = table.render(SUMMARY, Path("bench-summary.json"))
    assert block.startswith(table.BEGIN) and block.endswith(table.END)
    rows = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(table.GOALS)
    assert "| 0.81x | >= 0.8x | 2 cores, load 1.5, 2026-12-01T22:00:00Z |" in block
    assert "| 48 us | <= 50 us |" in block and "| 0.90x | >= 0.95x |" in block and "| 0.85x | >= 0.9x |" in block
    assert "| 1167 / 850 us; 586 us | (reported) |" in block and "| 933 / 433 us; 650 us |" in block
    assert "| 0.98x | >= 0.97x |" in block and "| 12 / 1500 ms |" in block and "| 0.96 (padded 0.61) | >= 0.9 |" in block


def test_a_missing_benchmark_or_figure_is_named_never_guessed(table):
    partial = {"capture": {"environment": ENV, "ratio": 0.5}}  # no caller_p99_us, no serving, no trainer
    block = table.render(partial, Path("bench-summary.json"))
    assert "not recorded by `capture`" in block and block.count("not in the summary") == len(table.GOALS) - 2


def test_write_replaces_only_the_generated_block(table, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(SUMMARY))
    page = tmp_path / "README.md"
    page.write_text(f"before\n{table.BEGIN}\nold\n{table.END}\nafter\n")
    assert table.main(["--summary", str(summary), "--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("\nafter\n") and "old" not in text and "0.81x" in text
    page.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="no generated block"):
        table.main(["--summary", str(summary), "--write", str(page)])
