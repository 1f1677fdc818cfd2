"""bench/gpu_check.py, the script a GPU machine runs, checked here on CPU at tiny sizes so that it does not rot
between the rare sessions that have a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_from_config_run_measures_every_step_of_both_models(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--tiny", "--from-config",
                           "--no-serving", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    models = {name: figures for name, figures in results.items() if isinstance(figures, dict)}
    assert set(models) == {"smollm2-135m-config-init", "qwen2-tiny"}
    for name, figures in models.items():
        assert "serving" not in figures
        for step in ("zero1", "zero3", "lora_step"):
            assert "error" not in figures[step], (name, step, figures[step])
        assert figures["zero1"]["tokens_per_s"] > 0 and figures["zero3"]["tokens_per_s"] > 0
        assert figures["lora_step"]["deepspeed_over_plain"] > 0


def test_from_config_without_no_serving_is_refused_before_any_work(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--tiny", "--from-config",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--no-serving" in done.stderr
    assert not (tmp_path / "gpu_check.json").exists()
