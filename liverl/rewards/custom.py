"""A team's own reward functions (`rewards.custom`), called on each trajectory beside the built-in components.

    [rewards.custom.tool_success]                       # entry name: its components are "custom.tool_success.*"
    function = "liverl.rewards.examples.tool_success:tool_success"
    components = ["rate"]

A function takes the AgentView the built-ins read (liverl/rewards/view.py) plus the entry's kwargs and returns
{name: float} for some of its declared components (absent: no evidence, as for the built-ins). What comes back
is checked: a declared name, a finite float, inside `bounds` (or clipped and counted). The function is
untrusted code in a long-running job, so a call that raises, times out or returns something else does not stop
labelling and never reads as a 0: its components are absent and the trajectory carries the signals

    custom.failed               entries that failed on this trajectory (present whenever custom rewards are set;
                                the monitors' rate.custom_failed)
    custom.<entry>.failed       1 when this entry's call failed (raised, timed out, returned something unusable)
    custom.<entry>.timed_out    1 when it failed by running past timeout_s
    custom.<entry>.clipped      how many of its values were clipped into bounds

and a warning is logged with the reason. Importing the function is configuration, not data: a path that does
not import raises CustomRewardError (the pipelines' workers check it at start-up, so the job fails with the
message instead of dead-lettering every session).

The version rows carry (`reward_version`) is `rewards.version` plus a digest of each entry's import path, its
module's source (when Python can read it) and its settings, so editing a reward function relabels as a new
version without anyone remembering to bump `rewards.version`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import logging
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from liverl.config.rewards import CustomRewardConfig, RewardsConfig
from liverl.rewards.components import Part
from liverl.rewards.view import AgentView

log = logging.getLogger(__name__)

PREFIX = "custom."
FAILED = "custom.failed"
# A call past its timeout cannot be killed (it is a Python thread), only abandoned. A function that hangs on every
# trajectory would pile up threads: past this many still running, its next calls fail at once as timed out.
MAX_ABANDONED = 8
_abandoned: defaultdict[str, list[threading.Thread]] = defaultdict(list)  # function path -> calls past timeout
_abandoned_lock = threading.Lock()  # Beam may label on several threads of one worker


class CustomRewardError(RuntimeError):
    """A rewards.custom entry cannot be used (its function does not import or is not callable)."""


class CallFailed(Exception):
    """One call's failure, with the reason logged and whether it was a timeout."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.timed_out = timed_out


@dataclass(frozen=True)
class CustomReward:
    """One resolved entry: its function and identity (import path plus module source digest)."""

    name: str
    config: CustomRewardConfig
    function: Callable[..., Mapping[str, float]]
    source_digest: str  # sha256 of the function's module source; "" when Python cannot read it (C, REPL)


def resolve(name: str, config: CustomRewardConfig) -> CustomReward:
    function, digest = _load(config.function)
    return CustomReward(name, config, function, digest)


@functools.lru_cache(maxsize=64)
def _load(path: str) -> tuple[Callable, str]:
    """(function, module source digest) of "package.module:function"; imported once per process."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise CustomRewardError(f"rewards.custom function {path!r}: module {module_name!r} does not import "
                                f"({error!r}); install it where the pipelines run, or fix the path") from error
    target = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise CustomRewardError(f"rewards.custom function {path!r}: {module_name} has no {attribute!r}; "
                                    "name a function defined in that module")
    if not callable(target):
        raise CustomRewardError(f"rewards.custom function {path!r} is a {type(target).__name__}, not callable")
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # built-in or compiled module, or defined where no source is kept
        source = ""
    return target, hashlib.sha256(source.encode()).hexdigest() if source else ""


def resolve_all(config: RewardsConfig) -> list[CustomReward]:
    """Every entry, resolved (raises CustomRewardError naming the first that does not import)."""
    return [resolve(name, entry) for name, entry in config.custom.items()]


def reward_version(config: RewardsConfig) -> str:
    """rewards.version, plus "+custom-<digest>" when custom rewards are set: their identity and settings."""
    if not config.custom:
        return config.version
    identity = [{"entry": reward.name, "function": reward.config.function, "source_sha256": reward.source_digest,
                 "settings": reward.config.model_dump(mode="json", exclude={"function"})}
                for reward in resolve_all(config)]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{config.version}+custom-{digest}"


def custom_part(view: AgentView, config: RewardsConfig, where: str = "") -> Part:
    """Components and failure signals of every custom entry on one trajectory (see the module docstring).

    `where` names the trajectory in the log line (e.g. "tenant t-1 session s-1 agent main")."""
    part = Part()
    if not config.custom:
        return part
    for reward in resolve_all(config):
        prefix = f"{PREFIX}{reward.name}."
        failed, timed_out, clipped = False, False, 0
        try:
            values, clipped = _bounded(reward, _checked(reward, _call(reward, view)))
        except CallFailed as failure:
            failed, timed_out = True, failure.timed_out
            log.warning("custom reward %s failed on %s: %s (flagged %sfailed; its components are absent)",
                        reward.name, where or view.agent_id, failure, prefix)
        else:
            part.components.update({prefix + component: value for component, value in values.items()})
            if clipped:
                log.warning("custom reward %s: %d value(s) clipped into %s on %s (counted in %sclipped)",
                            reward.name, clipped, list(reward.config.bounds), where or view.agent_id, prefix)
        part.signals.update({prefix + "failed": float(failed), prefix + "timed_out": float(timed_out),
                             prefix + "clipped": float(clipped)})
    part.signals[FAILED] = sum(part.signals[f"{PREFIX}{name}.failed"] for name in config.custom)
    return part


def _call(reward: CustomReward, view: AgentView):
    """The function's return value, or CallFailed when it raised or ran past timeout_s (its thread abandoned)."""
    with _abandoned_lock:
        abandoned = _abandoned[reward.config.function]
        abandoned[:] = [thread for thread in abandoned if thread.is_alive()]
        running = len(abandoned)
    if running >= MAX_ABANDONED:
        raise CallFailed(f"not called: {running} earlier calls are still running past timeout_s "
                         f"{reward.config.timeout_s:g}; make it return sooner or raise its timeout", timed_out=True)
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = reward.function(view, **reward.config.kwargs)
        except BaseException as error:  # reported as this trajectory's failure, whatever it was
            outcome["error"] = error

    thread = threading.Thread(target=target, name=f"liverl-custom-reward-{reward.name}", daemon=True)
    thread.start()
    thread.join(reward.config.timeout_s)
    if thread.is_alive():
        with _abandoned_lock:
            _abandoned[reward.config.function].append(thread)
        raise CallFailed(f"timed out after {reward.config.timeout_s:g} s (rewards.custom.{reward.name}.timeout_s)",
                         timed_out=True)
    if "error" in outcome:
        raise CallFailed(f"raised {outcome['error']!r}")
    return outcome["value"]



def _checked(reward: CustomReward, value) -> dict[str, float]:
    """The returned mapping as {declared name: finite float}, or CallFailed saying what was wrong."""
    if not isinstance(value, Mapping):
        raise CallFailed(f"returned a {type(value).__name__}, not a mapping of component name -> float")
    undeclared = sorted(str(name) for name in value if name not in reward.config.components)
    if undeclared:
        raise CallFailed(f"returned undeclared components {undeclared}; declare them in "
                         f"rewards.custom.{reward.name}.components (declared: {reward.config.components})")
    checked = {}
    for name, raw in value.items():
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            raise CallFailed(f"returned {name}={raw!r}: every value must be a finite number")
        checked[name] = float(raw)
    return checked


def _bounded(reward: CustomReward, values: dict[str, float]) -> tuple[dict[str, float], int]:
    """Values inside bounds, and how many were clipped there ("clip"); CallFailed for one outside ("fail")."""
    low, high = reward.config.bounds
    outside = {name: value for name, value in values.items() if not low <= value <= high}
    if outside and reward.config.out_of_bounds == "fail":
        raise CallFailed(f"returned {outside} outside bounds [{low:g}, {high:g}] (out_of_bounds = \"fail\")")
    return {name: min(max(value, low), high) for name, value in values.items()}, len(outside)
