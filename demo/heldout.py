"""The real-model demo's closing measure: held-out success, base versus the last served version.

The base and the served version play the same held-out real tasks of the final split (the one no config is tuned on;
an experiment's run plays the dev split instead, demo.real.heldout_split) under the same sampling seeds (`python -m
demo.evaluate heldout`, its own process, so its engine's memory goes when it ends), the helpers answered by the base
in both. The first sampling seed is drawn fresh every run (printed in the summary, so the run can be reproduced with
--seed), and each task is played under demo.real.heldout_seeds seeds. A LoRA version plays merged into a copy of the
base, in the same process as the base; a full-weights version plays in a process of its own, under the same seeds.
The summary gives out-of-template success (templates training never drew) first, then in-template, per family and
overall with 95 % Wilson intervals and the spread over seeds; the paired difference (served minus base) with its
95 % interval over tasks; the NLL ratio served / base on the forgetting set with its bootstrap interval; and the gate's
general-text NLL of both.

Every promotion is checked the same way: the run's promoted versions, oldest first, play in the same process under
the same seeds, and each is paired with the version it replaced as champion (the first, with the base). A promotion
worse than that by more than the gate's max_reward_drop (as a share of the reward's range, in success) is said.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demo.config import DemoLiverlConfig
from demo.evaluate import forgetting
from demo.product.engines import all_cores_environment
from liverl.contracts.adapter import is_adapter_folder, read_manifest
from liverl.io import processes

BASE_VERSION = "1"  # the packaged base's registry version: what serves before any promotion
PARTS = ("out-of-template", "in-template")  # demo/product/tasks/chat/base.py; the first is what generalises


@dataclass(frozen=True)
class Promotion:
    """A promoted version paired with the version it replaced as champion on the held-out tasks."""

    version: str
    replaced: str
    paired: dict  # groups ("parts", "families", "all") -> paired difference, version - replaced

    def overall(self) -> dict:
        return self.paired["all"]


@dataclass(frozen=True)
class HeldoutComparison:
    """What the evaluator printed for the base and for the last served version (its JSON objects)."""

    base: dict
    served: dict
    served_version: str
    paired: dict | None = None  # groups ("parts", "families", "all") -> paired difference, served - base
    promotions: tuple[Promotion, ...] = ()  # oldest first; empty: not measured
    max_drop: float | None = None  # the gate's max_reward_drop as a share of success (see success_drop)

    def lines(self) -> list[str]:
        seeds = self.base.get("sampling_seeds", [])
        out = [f"held-out {self.base.get('split', 'final')} split: {self.base.get('tasks', '?')} tasks x "
               f"{len(seeds)} sampling seeds {seeds} (reproduce: --seed {self.base.get('seed')})"]
        if self.served_version == BASE_VERSION:
            out.append("no trained version was served by the run's end: the base's own figures, nothing compared")
        for part in PARTS:
            for group, base in self.base.get("parts", {}).get(part, {}).items():
                served = self.served.get("parts", {}).get(part, {}).get(group, {})
                out.append(f"{part:15s} {group:12s} base {_rate(base)}  |  v{self.served_version} {_rate(served)}")
        for part in PARTS:
            for group, figures in (self.paired or {}).get("parts", {}).get(part, {}).items():
                out.append(f"{part:15s} {group:12s} v{self.served_version} - base {_difference(figures)}")
        if ratio := self.forgetting():
            out.append(forgetting.describe(ratio).replace("served", f"v{self.served_version}"))
        out.append(f"general-text NLL (nats/token, the gate's text) base {self.base['general']['nll']:.4f}  |  "
                   f"v{self.served_version} {self.served['general']['nll']:.4f}")
        for step in self.promotions:
            out.append(f"promotion v{step.version} - v{step.replaced} (the champion it replaced), all tasks "
                       f"{_difference(step.overall())}")
        if (said := self.promotions_verdict()) is not None:
            out.append(said)
        return out

    def promotions_verdict(self) -> str | None:
        """Whether any promotion was worse than the version it replaced by more than max_drop on all held-out tasks
        (its point estimate), and how many were shown worse at all (95 % interval below zero); None: not measured."""
        if not self.promotions or self.max_drop is None:
            return None
        worst = min(self.promotions, key=lambda step: step.overall()["difference"])
        too_far = [f"v{s.version}" for s in self.promotions if s.overall()["difference"] < -self.max_drop]
        shown_worse = [f"v{s.version}" for s in self.promotions if s.overall()["ci95"][1] < 0]
        verdict = (f"{len(too_far)} of {len(self.promotions)} promotions worse than the champion they replaced by more "
                   f"than {self.max_drop:.3f} ({', '.join(too_far) or 'none'})")
        return (f"{verdict}; shown worse at 95 %: {', '.join(shown_worse) or 'none'}; the largest drop "
                f"v{worst.version} - v{worst.replaced} {_difference(worst.overall(), paired_counts=False)}")

    def forgetting(self) -> dict | None:
        """The forgetting set's NLL ratio served / base with its interval (None: not measured)."""
        if "forgetting" not in self.base or "forgetting" not in self.served:
            return None
        return forgetting.ratio_figures(self.base["forgetting"], self.served["forgetting"])

    def _headline(self, part: str) -> dict | None:
        return (self.paired or {}).get("parts", {}).get(part, {}).get("all")

    def improved(self) -> bool | None:
        """Whether the served version beats the base out-of-template (tasks of templates training never drew) with
        a 95 % interval above zero (None: unpaired)."""
        figures = self._headline(PARTS[0])
        return None if figures is None else figures["ci95"][0] > 0

    def verdict(self) -> str | None:
        """The run's last word on the real model (None: unpaired), out-of-template first. The served reward moves
        with whichever tasks each version happened to get; the held-out tasks, the same for both, do not."""
        said = []
        for part in PARTS:
            if (figures := self._headline(part)) is not None:
                low, high = figures["ci95"]
                shown = "better than the base" if low > 0 else "worse than the base" if high < 0 else \
                    (f"not shown better than the base: too little evidence to tell it from no change ({figures['n']} "
                     f"tasks x {figures.get('seeds', '?')} seeds)")
                said.append(f"{part} {_difference(figures, paired_counts=False)}: {shown}")
        if not said:
            return None
        split = self.base.get("split", "final")
        where = "" if split == "final" else f" on the {split} split (configs are tuned on it: not the final claim)"
        return f"held-out success v{self.served_version} - base{where}, " + "; ".join(said)

    def as_dict(self) -> dict:
        return {"served_version": self.served_version, "base": self.base, "served": self.served,
                "paired": self.paired, "forgetting": self.forgetting(), "improved": self.improved(),
                "promotions": [{"version": s.version, "replaced": s.replaced, "paired": s.paired}
                               for s in self.promotions],
                "max_drop": self.max_drop, "promotions_verdict": self.promotions_verdict()}


def _rate(figures: dict) -> str:
    if not figures:
        return "-"
    low, high = figures["wilson95"]
    per_seed = figures.get("per_seed", [])
    spread = f" seeds {min(per_seed):.3f}-{max(per_seed):.3f}" if len(per_seed) > 1 else ""
    plays = figures.get("plays", figures["n"])
    return f"{figures['successes']:3d}/{plays:3d} = {figures['rate']:.3f} [{low:.3f}, {high:.3f}]{spread}"


def _difference(figures: dict, paired_counts: bool = True) -> str:
    low, high = figures["ci95"]
    counts = f" (paired over {figures['n']} tasks: {figures['gained']} gained, {figures['lost']} lost)"
    return f"{figures['difference']:+.3f}, 95 % [{low:+.3f}, {high:+.3f}]" + (counts if paired_counts else "")


def paired_from_results(base: dict, served: dict) -> dict | None:
    """The paired differences of two evaluator results (separate processes) over the same tasks and seeds; None
    when either lacks its per-task outcomes or they were played under other seeds."""
    from demo.evaluate.heldout_success import paired_outcomes

    if "outcomes" not in base or "outcomes" not in served or base.get("sampling_seeds") != served.get("sampling_seeds"):
        return None
    return paired_outcomes(base["outcomes"], served["outcomes"])


def success_drop(config: DemoLiverlConfig) -> float:
    """The gate's max_reward_drop as a share of held-out success: the same share of its range ([0, 1]) as the drop
    is of the reward's (trainer.gate.reward_range; 0.5 of [-1, 1] is 0.25)."""
    gate = config.trainer.gate
    low, high = gate.reward_range
    return gate.max_reward_drop / (high - low)


def heldout_plan(config: DemoLiverlConfig) -> tuple[int, int]:
    """(distinct tasks, sampling seeds) of the demo's held-out evaluation: demo.real.heldout_tasks plays a policy,
    spread over heldout_seeds seeds. Same plays, same cost: 210 plays were 210 tasks under one seed (about 2.5 min a
    policy on 2 cores) and are now 70 tasks under 3 seeds. Averaging a task over its seeds removes most of its
    sampling noise, which at temperature 0.7 is most of a 135M model's per-task noise, so the paired interval over
    70 tasks is not much wider than over 210, and the spread over seeds shows how much one base draw can move."""
    real = config.demo.real
    return max(1, real.heldout_tasks // real.heldout_seeds), real.heldout_seeds


TIMEOUT_PLAYS = 210  # demo.real.heldout_timeout_s is the ceiling of the base and one version at up to these plays


def evaluation_timeout_s(config: DemoLiverlConfig, adapters: int) -> float:
    """The held-out evaluation's ceiling: heldout_timeout_s for the base and one version at up to TIMEOUT_PLAYS plays
    each, scaled by the policies played (every further version plays the same tasks again) and by the plays."""
    real = config.demo.real
    return real.heldout_timeout_s * max(2, 1 + adapters) / 2 * max(1.0, real.heldout_tasks / TIMEOUT_PLAYS)


def evaluate_folder(config: DemoLiverlConfig, folder: Path, frozen: Path, out: Path, seed: int,
                    adapters: Sequence[Path] = ()) -> dict:
    """The evaluator on one folder (and, paired, under each adapter of it, oldest first) on the demo's held-out
    split (the final one unless demo.real.heldout_split says dev), size, seeds from `seed` and engine; its JSON
    result."""
    real = config.demo.real
    tasks, seeds = heldout_plan(config)
    argv = [sys.executable, "-m", "demo.evaluate", "heldout", "--folder", str(folder), "--frozen", str(frozen),
            "--tasks", str(tasks), "--seeds", str(seeds), "--seed", str(seed), "--split", real.heldout_split,
            "--engine", real.heldout_engine, "--json", str(out)]
    for adapter in adapters:
        argv += ["--adapter", str(adapter)]
    log = out.with_suffix(".log")
    log.unlink(missing_ok=True)
    # The demo's stages have stopped: the evaluation's engine computes on every core.
    process = processes.start("held-out evaluation", argv, log, env=all_cores_environment())
    try:
        code = process.wait(timeout=evaluation_timeout_s(config, len(adapters)))
    finally:
        processes.stop(process.pid)  # its group: the vLLM engine it started must not outlive it (a timeout)
    if code != 0 or not out.is_file():
        raise RuntimeError(f"the held-out evaluation of {folder} failed (exit {code}); see {log}")
    return json.loads(out.read_text())


def compare_heldout(config: DemoLiverlConfig, base: Path, served_version: str, say,
                    promoted: Sequence[str] = ()) -> HeldoutComparison | None:
    """Base and last served version on the held-out tasks, and every promotion (`promoted`: the run's promoted
    versions, oldest first) against the champion it replaced; None when switched off or nothing was trained."""
    from liverl.io.registry import ModelRegistry

    if config.demo.real.heldout_tasks == 0:
        say("      held-out evaluation off (demo.real.heldout_tasks = 0)")
        return None
    work = config.stack.data_dir / "heldout"
    work.mkdir(parents=True, exist_ok=True)
    frozen = config.demo.real.helpers_folder or base
    tasks, seeds = heldout_plan(config)
    seed = secrets.randbelow(2**31 - 16)  # fresh every run: no one draw of the base's sampling is tuned against
    say(f"      held-out ({config.demo.real.heldout_split} split): {tasks} real tasks x {seeds} sampling seeds from "
        f"{seed} each for the base and v{served_version} ({config.demo.real.heldout_engine})")
    if not served_version.isdigit() or served_version == BASE_VERSION:  # nothing trained was served: the base itself
        base_result = evaluate_folder(config, base, frozen, work / "base.json", seed)
        return HeldoutComparison(base_result, base_result, BASE_VERSION)
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    folder = _version_folder(registry.download(served_version, work / f"v{served_version}"))
    if is_adapter_folder(folder):
        _check_adapter_of_base(folder, served_version)
        line = [v for v in promoted if int(v) < int(served_version)]  # promoted_line: numbered, the base left out
        folders = [_version_folder(registry.download(v, work / f"v{v}")) for v in line]
        if not all(is_adapter_folder(f) for f in folders):
            say("      promotions not checked one by one: some promoted versions are full weights, not adapters")
            line, folders = [], []
        for version, each in zip(line, folders, strict=True):
            _check_adapter_of_base(each, version)
        line.append(served_version)
        both = evaluate_folder(config, base, frozen, work / f"base-and-v{served_version}.json", seed,
                               adapters=[*folders, folder])
        plan = {k: both[k] for k in ("split", "tasks", "seed", "sampling_seeds")}
        steps = [step["paired_with_previous"] for step in both.get("chain", ())] or [both["paired"]]
        promotions = tuple(Promotion(version, line[index - 1] if index else BASE_VERSION, paired)
                           for index, (version, paired) in enumerate(zip(line, steps, strict=True)))
        return HeldoutComparison({**plan, **both["base"]}, {**plan, **both["adapter"]}, served_version,
                                 both["paired"], promotions, success_drop(config))
    base_result = evaluate_folder(config, base, frozen, work / "base.json", seed)
    served_result = evaluate_folder(config, folder, frozen, work / f"v{served_version}.json", seed)
    return HeldoutComparison(base_result, served_result, served_version, paired_from_results(base_result, served_result))


def _check_adapter_of_base(folder: Path, version: str) -> None:
    if read_manifest(folder).base_version != BASE_VERSION:
        raise RuntimeError(f"v{version} is an adapter of v{read_manifest(folder).base_version}, not of the packaged "
                           "base (v1) that the held-out comparison plays it on")


def _version_folder(downloaded: Path) -> Path:
    """The HF policy or adapter folder in what the registry download left (the folder itself or one below)."""
    if (downloaded / "config.json").is_file() or is_adapter_folder(downloaded):
        return downloaded
    found = sorted({p.parent for p in downloaded.rglob("*") if p.name == "config.json" or is_adapter_folder(p.parent)})
    if not found:
        raise FileNotFoundError(f"no HF policy or adapter folder under {downloaded}")
    return found[0]
