"""The held-out evaluator end to end on the real base policy (SmolLM2 converted from its package) in vLLM."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # converts the 135M model and starts a vLLM engine (minutes on 2 busy cores)


@pytest.fixture
def smollm2(smollm2_converted) -> Path:
    return smollm2_converted[0]


def test_evaluator_reports_each_family_with_wilson_intervals_and_the_general_nll(smollm2, tmp_path):
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "demo.evaluate", "heldout", "--folder", str(smollm2), "--tasks", "6",
         "--json", str(out)], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines() if "Error" in line)[-4000:]
    result = json.loads(out.read_text())
    # vLLM may log its own shutdown to stdout after the evaluator's JSON line
    printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert printed and json.loads(printed[-1]) == result
    assert sorted(result["families"]) == ["coding", "orchestrator", "search"]
    for family in result["families"].values():
        low, high = family["wilson95"]
        assert family["n"] == 2 and 0.0 <= low <= family["rate"] <= high <= 1.0
    general = result["general"]
    assert general["tokens"] > 300 and math.isclose(general["perplexity"], math.exp(general["nll"]))
    assert 2.5 < general["nll"] < 4.5  # the base model reads plain English well


def test_evaluator_refuses_a_folder_without_a_model(tmp_path):
    done = subprocess.run([sys.executable, "-m", "demo.evaluate", "heldout", "--folder", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not a HF policy folder" in done.stderr
