"""The real-model demo's closing measure: held-out success per family, base versus the last served version.

The base and the served version play the same held-out real tasks with the same seeds
(`python -m demo.evaluate heldout`, its own process, so its engine's memory goes when it ends), the helpers
answered by the base in both. A LoRA version plays merged into a copy of the base, in the same process
as the base, and the comparison adds the paired difference (served minus base) with its 95 % interval; a
full-weights version plays in a process of its own. The summary prints success with 95 % Wilson intervals per
family and the general-text NLL of both.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from demo.config import DemoLiverlConfig
from demo.product.engines import all_cores_environment
from liverl.contracts.adapter import is_adapter_folder, read_manifest
from liverl.io import processes


@dataclass(frozen=True)
class HeldoutComparison:
    """What the evaluator printed for the base and for the last served version (its JSON objects)."""

    base: dict
    served: dict
    served_version: str
    paired: dict | None = None  # family (and "all") -> paired difference, served - base; LoRA versions only

    def lines(self) -> list[str]:
        out = []
        for family, base in self.base["families"].items():
            served = self.served["families"].get(family, {})
            out.append(f"held-out {family:12s} base {_rate(base)}  |  v{self.served_version} {_rate(served)}")
        for family, figures in (self.paired or {}).items():
            low, high = figures["ci95"]
            out.append(f"held-out {family:12s} v{self.served_version} - base {figures['difference']:+.3f} "
                       f"95% [{low:+.3f}, {high:+.3f}] (paired: {figures['gained']} gained, {figures['lost']} lost)")
        out.append(f"general-text NLL (nats/token) base {self.base['general']['nll']:.4f}  |  "
                   f"v{self.served_version} {self.served['general']['nll']:.4f}")
        return out

    def improved(self) -> bool | None:
        """Whether the served version beats the base overall with a 95 % interval above zero (None: unpaired)."""
        return None if not self.paired else self.paired["all"]["ci95"][0] > 0

    def verdict(self) -> str | None:
        """The run's last word on the real model (None: unpaired). The served reward moves with whichever tasks each
        version happened to get; the held-out tasks, the same for the base and the last served version, do not."""
        if not self.paired:
            return None
        figures = self.paired["all"]
        low, high = figures["ci95"]
        shown = "better than the base" if self.improved() else "not shown better than the base"
        return (f"held-out success v{self.served_version} - base {figures['difference']:+.3f}, "
                f"95 % [{low:+.3f}, {high:+.3f}]: {shown}")

    def as_dict(self) -> dict:
        return {"served_version": self.served_version, "base": self.base, "served": self.served,
                "paired": self.paired, "improved": self.improved()}


def _rate(figures: dict) -> str:
    if not figures:
        return "-"
    low, high = figures["wilson95"]
    return f"{figures['successes']:3d}/{figures['n']:3d} = {figures['rate']:.3f} [{low:.3f}, {high:.3f}]"


def evaluate_folder(config: DemoLiverlConfig, folder: Path, frozen: Path, out: Path,
                    adapter: Path | None = None) -> dict:
    """The evaluator on one folder (and, paired, under an adapter of it), with the demo's held-out size, seed and
    engine; its JSON result."""
    real = config.demo.real
    argv = [sys.executable, "-m", "demo.evaluate", "heldout", "--folder", str(folder), "--frozen", str(frozen),
            "--tasks", str(real.heldout_tasks), "--seed", str(config.demo.seed), "--engine", real.heldout_engine,
            "--json", str(out)] + (["--adapter", str(adapter)] if adapter is not None else [])
    log = out.with_suffix(".log")
    log.unlink(missing_ok=True)
    # The demo's stages have stopped: the evaluation's engine computes on every core.
    process = processes.start("held-out evaluation", argv, log, env=all_cores_environment())
    try:
        code = process.wait(timeout=real.heldout_timeout_s)
    finally:
        processes.stop(process.pid)  # its group: the vLLM engine it started must not outlive it (a timeout)
    if code != 0 or not out.is_file():
        raise RuntimeError(f"the held-out evaluation of {folder} failed (exit {code}); see {log}")
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
    if not served_version.isdigit() or served_version == "1":  # nothing trained was served: the base itself
        base_result = evaluate_folder(config, base, frozen, work / "base.json")
        return HeldoutComparison(base_result, base_result, "1")
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    folder = _version_folder(registry.download(served_version, work / f"v{served_version}"))
    if is_adapter_folder(folder):
        if read_manifest(folder).base_version != "1":
            raise RuntimeError(f"v{served_version} is an adapter of v{read_manifest(folder).base_version}, not of the "
                               "packaged base (v1) that the held-out comparison plays it on")
        both = evaluate_folder(config, base, frozen, work / f"base-and-v{served_version}.json", adapter=folder)
        return HeldoutComparison(both["base"], both["adapter"], served_version, both["paired"])
    base_result = evaluate_folder(config, base, frozen, work / "base.json")
    served_result = evaluate_folder(config, folder, frozen, work / f"v{served_version}.json")
    return HeldoutComparison(base_result, served_result, served_version)


def _version_folder(downloaded: Path) -> Path:
    """The HF policy or adapter folder in what the registry download left (the folder itself or one below)."""
    if (downloaded / "config.json").is_file() or is_adapter_folder(downloaded):
        return downloaded
    found = sorted({p.parent for p in downloaded.rglob("*") if p.name == "config.json" or is_adapter_folder(p.parent)})
    if not found:
        raise FileNotFoundError(f"no HF policy or adapter folder under {downloaded}")
    return found[0]
