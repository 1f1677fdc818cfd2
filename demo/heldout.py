"""The real-model demo's closing measure: held-out success per family, base versus the last served version.

Each policy folder is played on the same held-out real tasks (demo/product/tasks_real/evaluate.py, its own
process, so its engine's memory goes when it ends), the helpers answered by the base in both; the summary
prints success with 95 % Wilson intervals per family and the general-text NLL of both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from demo.config import DemoLiverlConfig


@dataclass(frozen=True)
class HeldoutComparison:
    """What evaluate.py printed for the base and for the last served version (its JSON objects)."""

    base: dict
    served: dict
    served_version: str

    def lines(self) -> list[str]:
        out = []
        for family, base in self.base["families"].items():
            served = self.served["families"].get(family, {})
            out.append(f"held-out {family:12s} base {_rate(base)}  |  v{self.served_version} {_rate(served)}")
        out.append(f"general-text NLL (nats/token) base {self.base['general']['nll']:.4f}  |  "
                   f"v{self.served_version} {self.served['general']['nll']:.4f}")
        return out

    def as_dict(self) -> dict:
        return {"served_version": self.served_version, "base": self.base, "served": self.served}


def _rate(figures: dict) -> str:
    if not figures:
        return "-"
    low, high = figures["wilson95"]
    return f"{figures['successes']:3d}/{figures['n']:3d} = {figures['rate']:.3f} [{low:.3f}, {high:.3f}]"


def evaluate_folder(config: DemoLiverlConfig, folder: Path, frozen: Path, out: Path) -> dict:
    """evaluate.py on one folder, with the demo's held-out size, seed and engine; its JSON result."""
    real = config.demo.real
    argv = [sys.executable, "-m", "demo.product.tasks_real.evaluate", "--folder", str(folder), "--frozen", str(frozen),
            "--tasks", str(real.heldout_tasks), "--seed", str(config.demo.seed), "--engine", real.heldout_engine,
            "--json", str(out)]
    log = out.with_suffix(".log")
    with log.open("wb") as sink:
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, timeout=real.heldout_timeout_s)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"the held-out evaluation of {folder} failed (exit {done.returncode}); see {log}")
    return json.loads(out.read_text())


def compare_heldout(config: DemoLiverlConfig, base: Path, served_version: str, say) -> HeldoutComparison | None:
    """Base and last served version on the held-out tasks; None when switched off or nothing was trained."""
    from liverl.io.registry import ModelRegistry

    if config.demo.real.heldout_tasks == 0:
        say("      held-out evaluation off (demo.real.heldout_tasks = 0)")
        return None
    work = config.stack.data_dir / "heldout"
    work.mkdir(parents=True, exist_ok=True)
    frozen = config.demo.real.helpers_folder or base
    say(f"      held-out: {config.demo.real.heldout_tasks} real tasks each for the base and v{served_version} "
        f"({config.demo.real.heldout_engine})")
    base_result = evaluate_folder(config, base, frozen, work / "base.json")
    if not served_version.isdigit() or served_version == "1":  # nothing trained was served: the base itself
        served_result = base_result
    else:
        registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
        folder = _policy_folder(registry.download(served_version, work / f"v{served_version}"))
        served_result = evaluate_folder(config, folder, frozen, work / f"v{served_version}.json")
    return HeldoutComparison(base_result, served_result, served_version if served_version.isdigit() else "1")


def _policy_folder(downloaded: Path) -> Path:
    """The HF folder in what the registry download left (the folder itself or one level below)."""
    if (downloaded / "config.json").is_file():
        return downloaded
    found = sorted(p.parent for p in downloaded.rglob("config.json"))
    if not found:
        raise FileNotFoundError(f"no HF policy folder (config.json) under {downloaded}")
    return found[0]
