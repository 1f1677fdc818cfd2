"""The gate's online evidence: an external evaluator runs the candidate and the champion on held-out tasks.

The trainer cannot run a product (stages import no product code), so the product hands it a command
(trainer.gate.online_eval_command) that runs both policy folders on tasks no version was trained on and
prints ONE JSON object on the last line of its stdout (anything before it is ignored; progress goes to stderr):

    {"candidate": {"n": 30, "reward_mean": 0.61, "reward_se": 0.07,
                   "monitors": {"rate.clarifying": 0.03, ...}, "monitors_se": {"rate.clarifying": 0.02, ...}},
     "champion":  {... the same keys ...},
     "paired":    {"n": 30, "reward_change": -0.01, "reward_change_se": 0.03,            (optional)
                   "monitors_change": {...}, "monitors_change_se": {...}}}

reward_*: the evaluator's reward (higher is better), the verified outcome the monitors are judged against;
monitors: hacking-monitor rates (higher is worse); *_se: standard errors, one per monitor (a monitor without one
cannot be judged, and the gate refuses the candidate: a missing SE is never read as 0). "paired" holds the
candidate-minus-champion differences over the same tasks, whose SE is smaller than the two sides' combined;
without it the sides are taken as independent, SE = sqrt(se_candidate² + se_champion²).

Calibration (the demo, 150 held-out tasks, paired, z = 2; write the same table for a new product): the
tolerances must sit between the bounds of healthy and of broken candidates. Measured on the demo's test base
policy (reward 0.14-0.21 by seed): copies with weight noise 0.01 (reward -0.005..-0.016, 5 seeds) had reward
lower bounds -0.012..-0.035 and monitor upper bounds +0.020..+0.040; noise 0.02 (-0.01..-0.035): -0.020..-0.065
and +0.037..+0.064; a better-fitted policy (+0.24): reward +0.17, monitors up to +0.051 (clarifying +0.013 ±
0.019). Broken ones: noise 0.05 (reward -0.12..-0.18): reward bounds -0.17..-0.24, broken-call bounds
+0.21..+0.30. Hence max_online_reward_drop 0.05 and max_online_monitor_increase 0.1; with fewer tasks the
bounds widen as 1/sqrt(tasks) and healthy candidates start failing (at 60 tasks: reward bounds to -0.10).
The monitors are judged as trainer/step/hacking.py says: a rise must be shown past max_online_monitor_increase after
the correction over the monitors, and counts only while the reward is not shown to rise with it (those broken
copies are refused on their reward).

Fail-closed: a command that fails, runs past its timeout, prints no JSON or a partial one, a non-finite
figure, or monitors that the two sides do not share raise OnlineEvalError; the gate turns it into a refusal.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from liverl.config.trainer import GateConfig
from liverl.io import processes

STDERR_TAIL_CHARS = 2000  # how much of a failed evaluator's stderr an error message quotes


class OnlineEvalError(RuntimeError):
    """The evaluator gave no usable evidence; the gate must refuse the candidate."""


@dataclass(frozen=True)
class PolicyFigures:
    """One side's figures over the evaluator's tasks."""

    n: int
    reward_mean: float
    reward_se: float
    monitors: dict[str, float]  # monitor name -> rate, higher is worse
    monitors_se: dict[str, float]


@dataclass(frozen=True)
class PairedFigures:
    """Candidate minus champion, task by task over the same tasks."""

    n: int
    reward_change: float
    reward_change_se: float
    monitors_change: dict[str, float]
    monitors_change_se: dict[str, float]


@dataclass(frozen=True)
class OnlineEvaluation:
    """Produced by evaluate_online, judged by judge_online, recorded in the gate report (figures)."""

    candidate: PolicyFigures
    champion: PolicyFigures
    paired: PairedFigures | None = None

    def reward_change(self) -> tuple[float, float]:
        """(candidate - champion, its SE): paired when the evaluator gave it, else independent sides."""
        if self.paired is not None:
            return self.paired.reward_change, self.paired.reward_change_se
        return (self.candidate.reward_mean - self.champion.reward_mean,
                math.hypot(self.candidate.reward_se, self.champion.reward_se))

    def monitor_changes(self) -> dict[str, tuple[float, float | None]]:
        """Monitor name -> (candidate - champion, its SE), the same way as reward_change; the SE is None when the
        evaluator left it out (never read as 0: the gate refuses a monitor it cannot judge)."""
        if self.paired is not None:
            return {name: (change, self.paired.monitors_change_se.get(name))
                    for name, change in sorted(self.paired.monitors_change.items())}
        cand, champ = self.candidate, self.champion
        return {name: (cand.monitors[name] - champ.monitors[name],
                       None if name not in cand.monitors_se or name not in champ.monitors_se
                       else math.hypot(cand.monitors_se[name], champ.monitors_se[name]))
                for name in sorted(cand.monitors)}

    def figures(self, prefix: str = "online") -> dict[str, float | int]:
        """Flat figures for the gate report. Monitor moves go under "monitor.<prefix>.": the trainer's progress
        line leaves "monitor.*" keys out, the report tag keeps them."""
        change, se = self.reward_change()
        flat: dict[str, float | int] = {
            f"{prefix}_tasks": min(self.candidate.n, self.champion.n),
            f"{prefix}_candidate_reward": self.candidate.reward_mean,
            f"{prefix}_champion_reward": self.champion.reward_mean,
            f"{prefix}_reward_change": change,
            f"{prefix}_reward_change_se": se,
        }
        for name, (move, move_se) in self.monitor_changes().items():
            flat[f"monitor.{prefix}.{name}"] = move
            flat[f"monitor.{prefix}.{name}_se"] = "missing" if move_se is None else move_se
            flat[f"monitor.{prefix}.{name}.candidate"] = self.candidate.monitors.get(name, math.nan)
        return flat


def evaluate_online(command: Sequence[str] | None, candidate: Path, champion: Path,
                    timeout_s: float) -> OnlineEvaluation | None:
    """Run the evaluator on the two policy folders and parse its figures; None when no command is configured."""
    if not command:
        return None
    argv = [arg.replace("{candidate}", str(candidate)).replace("{champion}", str(champion)) for arg in command]
    if argv[0] == "python":  # the trainer's own environment, whatever `python` is on PATH
        argv[0] = sys.executable
    stdout, stderr, code = _run(argv, timeout_s)
    if code != 0:
        raise OnlineEvalError(f"online evaluator {argv} exited with code {code}; stderr tail:\n"
                              f"{stderr[-STDERR_TAIL_CHARS:]}")
    try:
        return parse_evaluation(stdout)
    except OnlineEvalError as error:
        raise OnlineEvalError(f"online evaluator {argv}: {error}; stderr tail:\n{stderr[-STDERR_TAIL_CHARS:]}")


def _run(argv: list[str], timeout_s: float) -> tuple[str, str, int]:
    """Run argv in its own process group; past timeout_s the whole group is stopped and OnlineEvalError raised."""
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                   text=True, start_new_session=True)
    except OSError as error:
        raise OnlineEvalError(f"cannot start the online evaluator {argv}: {error}; check "
                              "trainer.gate.online_eval_command") from error
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.stop(process.pid, timeout_s=5.0)
        _, stderr = process.communicate()
        raise OnlineEvalError(f"online evaluator {argv} ran past trainer.gate.online_eval_timeout_s={timeout_s:g} s "
                              f"and was stopped; stderr tail:\n{stderr[-STDERR_TAIL_CHARS:]}") from None
    return stdout, stderr, process.returncode


def parse_evaluation(stdout: str) -> OnlineEvaluation:
    """The evaluator's figures from the last non-empty line of its stdout (see the module docstring)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise OnlineEvalError("printed nothing on stdout; it must print one JSON object as its last line")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as error:
        raise OnlineEvalError(f"last stdout line is not a JSON object ({error}): {lines[-1][:200]!r}") from None
    if not isinstance(data, dict):
        raise OnlineEvalError(f"last stdout line is JSON but not an object: {lines[-1][:200]!r}")
    candidate = _policy_figures(data, "candidate")
    champion = _policy_figures(data, "champion")
    if set(candidate.monitors) != set(champion.monitors):
        raise OnlineEvalError(f"partial evidence: monitors {sorted(set(candidate.monitors) ^ set(champion.monitors))} "
                              "are reported for one side only")
    paired = _paired_figures(data["paired"], set(candidate.monitors)) if "paired" in data else None
    return OnlineEvaluation(candidate, champion, paired)


def _policy_figures(data: Mapping, side: str) -> PolicyFigures:
    part = _section(data, side)
    return PolicyFigures(
        n=_count(part, side),
        reward_mean=_number(part, "reward_mean", side),
        reward_se=_number(part, "reward_se", side),
        monitors=_rates(part, "monitors", side, required=True),
        monitors_se=_rates(part, "monitors_se", side, required=False),
    )


def _paired_figures(part, monitors: set[str]) -> PairedFigures:
    if not isinstance(part, Mapping):
        raise OnlineEvalError("partial evidence: 'paired' is not an object")
    changes = _rates(part, "monitors_change", "paired", required=True)
    if set(changes) != monitors:
        raise OnlineEvalError(f"partial evidence: paired monitors {sorted(changes)} differ from the sides' "
                              f"{sorted(monitors)}")
    return PairedFigures(
        n=_count(part, "paired"),
        reward_change=_number(part, "reward_change", "paired"),
        reward_change_se=_number(part, "reward_change_se", "paired"),
        monitors_change=changes,
        monitors_change_se=_rates(part, "monitors_change_se", "paired", required=False),
    )


def _section(data: Mapping, side: str) -> Mapping:
    part = data.get(side)
    if not isinstance(part, Mapping):
        raise OnlineEvalError(f"partial evidence: no '{side}' object in the evaluator's JSON")
    return part


def _count(part: Mapping, side: str) -> int:
    value = part.get("n")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OnlineEvalError(f"partial evidence: {side}.n must be a task count, got {value!r}")
    return value


def _number(part: Mapping, key: str, side: str) -> float:
    value = part.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OnlineEvalError(f"partial evidence: {side}.{key} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise OnlineEvalError(f"{side}.{key} is {value}: a figure that is not finite cannot be judged")
    return float(value)


def _rates(part: Mapping, key: str, side: str, *, required: bool) -> dict[str, float]:
    value = part.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise OnlineEvalError(f"partial evidence: {side}.{key} must be an object of name -> number, got {value!r}")
    return {str(name): _number(value, name, f"{side}.{key}") for name in value}


def judge_online(evaluation: OnlineEvaluation, config: GateConfig) -> list[str]:
    """The reasons to refuse the candidate on the evaluator's figures (empty: no objection).

    The reward change is judged at its lower confidence bound, change - z·SE, against -max_online_reward_drop
    (written so that a NaN fails). The monitors are judged together with the evaluator's reward, the verified
    outcome of the same tasks (trainer/step/hacking.py): a monitor's rise past max_online_monitor_increase counts only
    when it is significant after the correction over all the monitors and the outcome was not shown to rise with it; a
    monitor without a standard error is refused."""
    from trainer.step.hacking import MonitorMove, judge_hacking

    reasons = []
    z = config.confidence_z
    sides = {"candidate": evaluation.candidate, "champion": evaluation.champion}
    few = {name: figures.n for name, figures in sides.items() if figures.n < 2}
    if evaluation.paired is not None and evaluation.paired.n < 2:
        few["paired"] = evaluation.paired.n
    if few:
        reasons.append(f"online evaluation ran too few tasks {few}: need at least 2 per side for an error")
    change, se = evaluation.reward_change()
    if not change - z * se >= -config.max_online_reward_drop:
        reasons.append(f"online reward {change:+.4f} ± {z:g}·{se:.4f} vs champion on held-out tasks: may drop "
                       f"more than {config.max_online_reward_drop}")
    moves = [MonitorMove(name, move, move_se, "up", config.max_online_monitor_increase, change, se)
             for name, (move, move_se) in evaluation.monitor_changes().items()]
    for name, reason in judge_hacking(moves, config.monitor_alpha, config.monitor_correction, z).flags.items():
        reasons.append(f"online: {reason} (on the candidate's own outputs: candidate "
                       f"{evaluation.candidate.monitors[name]:.4f}, champion {evaluation.champion.monitors[name]:.4f})")
    return reasons
