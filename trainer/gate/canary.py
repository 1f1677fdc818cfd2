"""The live canary: a candidate the off-policy reward test defers is served to a share of the sessions, and judged on
the outcome of whole sessions each version served.

How it runs (trainer.gate.canary_alias set; off by default). When a candidate's judgement defers and no canary runs,
the gate points the group's canary alias (liverl.contracts.names.canary_alias: `<alias>`, a tenant's `<alias>-<tenant>`)
at it; serving follows that alias and sends serving.canary_fraction of the SESSIONS to it, each session whole
(serving/router.py). Each later round the gate worker (trainer/gate/worker.py) reads the round's finished sessions
(GateEvidence.served: the table snapshot the round's candidate was trained up to) and takes those that ended after the
canary began and were served by ONE version, the candidate or the champion, in end order. Each session of one version
that ends right after a session of the other is paired with it; of two sessions of one version in a row, the later
waits and the earlier is left out. So every pair's two sessions ended next to each other (a drift of the traffic over
the day moves both), and which sessions are paired depends on the order in which the versions' sessions ended, never
on their rewards. A session's reward is the mean of its trajectories' mixed rewards (the reward library, at the round's
trainer step), clipped into gate.reward_range [a, b] (clipped sessions are counted).

The test. Each pair's difference D = r_candidate - r_champion lies in [-(b - a), b - a] and has mean `change` (the
candidate's expected session reward minus the champion's). The betting test of trainer/gate/sequential.py (BettingTest,
Waudby-Smith & Ramdas) runs on D and on -D, with the off-policy test's hypotheses:

    pass : "change <= -max_reward_drop" rejected at level max_false_promotion (a candidate worse by the drop passes at
           most that often, however many rounds look)
    fail : "change >= 0" rejected at level max_false_refusal (shown worse), or canary_max_sessions pairs spent
           without a pass (the budget)
    else : the canary goes on; the candidate keeps its "defer"

A pass promotes as the gate does (CheckpointPublisher.canary_verdict: compare-and-set of the champion alias under the
promotion lease, the version signed), a fail refuses; either way the canary alias is removed, and the report's
decided_by says that the live canary decided, on how many sessions, with the change and its bounds.

The canary ends without a decision (alias removed, the candidate stays "defer") when the champion changes (a newer
candidate promoted: the evidence was about the former one) or the off-policy test decides the candidate first. One
canary runs at a time: a newer candidate deferred meanwhile waits for the next one. A trainer that stops leaves the
alias set; the next start removes it (a canary is not saved).

Assumptions: serving routes by a secret keyed hash of the session id, independent of its content and not chosen by
clients, so the two versions' sessions are draws from the same traffic (a client that behaves otherwise once a reply
names its version is not guarded against); sessions are independent; rewards bounded in gate.reward_range; the
session's end time is not chosen by its reward in a way that differs between the versions. A tenant without an
adapter of its own is served the shared champion: its canary is compared with that (serving follows a tenant's
canary alias without its champion alias, serving/swap/alias_watcher.py), and a pass makes the candidate the tenant's
first champion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from liverl.contracts import names
from trainer.gate.sequential import GRID_POINTS, BettingTest, reward_test_on
from trainer.gate.served import ServedSession
from trainer.gate.statistics import DEFER, FAIL, PASS

if TYPE_CHECKING:
    from trainer.io.publish import CheckpointPublisher, CheckpointToPublish, PublishResult


@dataclass(frozen=True)
class CanarySettings:
    """The gate settings the canary reads (liverl.config.trainer.GateConfig)."""

    max_reward_drop: float
    max_false_promotion: float
    max_false_refusal: float
    max_sessions: int
    reward_range: tuple[float, float] = (-1.0, 1.0)

    @classmethod
    def of(cls, config) -> "CanarySettings":
        return cls(config.max_reward_drop, config.max_false_promotion, config.max_false_refusal,
                   config.canary_max_sessions, tuple(config.reward_range))

    @property
    def span(self) -> float:
        return self.reward_range[1] - self.reward_range[0]

    @property
    def testing(self) -> bool:
        """A drop of the whole reward range turns the reward test off: nothing for a canary to decide."""
        return reward_test_on(self.max_reward_drop, self.reward_range)


@dataclass(frozen=True)
class CanaryVerdict:
    """Arrays of the streams' leading shape (0-d for the gate's one canary)."""

    decision: np.ndarray  # PASS | FAIL | DEFER
    change: np.ndarray  # mean paired difference so far (NaN before the first pair)
    lower: np.ndarray  # anytime-valid lower bound of the change (level max_false_promotion)
    upper: np.ndarray  # anytime-valid upper bound of the change (level max_false_refusal)
    pairs: np.ndarray
    shown_worse: np.ndarray
    out_of_budget: np.ndarray


@dataclass
class CanaryTest:
    """The two betting tests on paired differences; vectorised over `shape` (the simulation's streams). Mutable."""

    settings: CanarySettings
    shape: tuple[int, ...] = ()
    grid: bool = True  # False: only the decision hypotheses (the simulation); True: also the reported bounds
    promote: BettingTest = field(init=False)  # on D: "change <= m"
    refuse: BettingTest = field(init=False)  # on -D: "change >= -m"

    def __post_init__(self) -> None:
        s = self.settings
        if not s.testing:
            raise ValueError(f"max_reward_drop {s.max_reward_drop} spans the reward range {s.reward_range}: no canary "
                             "test to run")
        extra = np.linspace(-s.span, s.span, GRID_POINTS)[1:] if self.grid else np.empty(0)
        self.promote = BettingTest.start(np.unique(np.r_[-s.max_reward_drop, extra]), -s.span, self.shape, s.span / 2)
        self.refuse = BettingTest.start(np.unique(np.r_[0.0, extra]), -s.span, self.shape, s.span / 2)
        self._at_drop = int(np.searchsorted(self.promote.hypotheses, -s.max_reward_drop))
        self._at_zero = int(np.searchsorted(self.refuse.hypotheses, 0.0))

    def observe(self, differences: np.ndarray) -> CanaryVerdict:
        """Take in the next pairs' differences (..., k), in end order, up to the budget; judge all pairs so far."""
        differences = np.asarray(differences, dtype=np.float64)
        room = self.settings.max_sessions - int(np.max(self.promote.count, initial=0))
        differences = differences[..., :max(room, 0)]
        if differences.shape[-1]:
            self.promote, self.refuse = self.promote.observe(differences), self.refuse.observe(-differences)
        return self.verdict()

    def verdict(self) -> CanaryVerdict:
        s = self.settings
        passed = self.promote.rejected(s.max_false_promotion)[..., self._at_drop]
        shown_worse = ~passed & self.refuse.rejected(s.max_false_refusal)[..., self._at_zero]
        pairs = self.promote.count
        out_of_budget = ~passed & ~shown_worse & (pairs >= s.max_sessions)
        with np.errstate(invalid="ignore", divide="ignore"):
            change = np.where(pairs > 0, self.promote.total / pairs, np.nan)
        return CanaryVerdict(decision=np.where(passed, PASS, np.where(shown_worse | out_of_budget, FAIL, DEFER)),
                             change=change, lower=self.promote.lower_bound(s.max_false_promotion),
                             upper=-self.refuse.lower_bound(s.max_false_refusal), pairs=pairs,
                             shown_worse=shown_worse, out_of_budget=out_of_budget)


@dataclass
class Canary:
    """One running canary: its candidate, the champion it is compared with, and what it has taken in. Mutable."""

    version: str
    champion: str  # the version serving the group's other sessions: its alias's, or the shared one for a new tenant
    started_ms: int
    test: CanaryTest
    seen: set[str] = field(default_factory=set)  # sessions taken in (paired or left out)
    waiting: ServedSession | None = None  # the latest session not paired yet
    sessions: dict[str, int] = field(default_factory=dict)  # version -> its sessions seen
    clipped: int = 0  # paired sessions whose reward was clipped into the range
    alias_holder: str | None = None  # what the group's champion alias named at the start (None: a tenant without one)

    def take(self, served: Sequence[ServedSession]) -> CanaryVerdict:
        """The verdict after the round's new sessions (`served`: every session the round's rows show)."""
        low, high = self.test.settings.reward_range
        new = sorted((s for s in served if s.ended_ms > self.started_ms and s.key not in self.seen
                      and s.version in (self.version, self.champion)), key=lambda s: (s.ended_ms, s.key))
        differences = []
        for session in new:
            self.seen.add(session.key)
            self.sessions[session.version] = self.sessions.get(session.version, 0) + 1
            if self.waiting is None or self.waiting.version == session.version:
                self.waiting = session  # the later of two sessions of one version waits; the earlier is left out
                continue
            mine, theirs = (session, self.waiting) if session.version == self.version else (self.waiting, session)
            self.clipped += sum(not low <= s.reward <= high for s in (mine, theirs))
            differences.append(float(np.clip(mine.reward, low, high) - np.clip(theirs.reward, low, high)))
            self.waiting = None
        return self.test.observe(np.asarray(differences))


def describe(verdict: CanaryVerdict, canary: Canary) -> str:
    """The canary's state in words, for the report and the progress line."""
    s = canary.test.settings
    n = int(verdict.pairs)
    if n == 0:
        return (f"live canary: no pair yet ({canary.sessions.get(canary.version, 0)} candidate-served and "
                f"{canary.sessions.get(canary.champion, 0)} champion-served sessions seen); goes on")
    seen = f"of {canary.sessions.get(canary.version, 0)} and {canary.sessions.get(canary.champion, 0)} seen"
    where = (f"live canary: {n} candidate-served and {n} champion-served sessions paired in end order ({seen}), "
             f"change {float(verdict.change):+.3f} [lower bound {float(verdict.lower):+.2f}, upper "
             f"{float(verdict.upper):+.2f}]")
    if verdict.decision == PASS:
        return (f"{where}: lower bound above -{s.max_reward_drop:g} (anytime-valid at level "
                f"{s.max_false_promotion:g})")
    if bool(verdict.shown_worse):
        return f"{where}: upper bound below 0, shown worse (anytime-valid at level {s.max_false_refusal:g})"
    if bool(verdict.out_of_budget):
        return (f"{where}: the budget gate.canary_max_sessions {s.max_sessions} is spent and the lower bound is not "
                f"above -{s.max_reward_drop:g}")
    return f"{where}: not yet above -{s.max_reward_drop:g}; goes on"


class LiveCanary:
    """The gate worker's canary: started on a deferred candidate, looked at each round, ended by its decision."""

    def __init__(self, publisher: CheckpointPublisher, say: Callable[[str], None] = print):
        self.publisher, self.say = publisher, say
        self.canary: Canary | None = None
        self._cleared = False  # a canary alias left by a stopped trainer is removed on the first round

    @property
    def on(self) -> bool:
        gate = self.publisher.gate
        return bool(getattr(gate, "canary_alias", None)) and CanarySettings.of(gate).testing

    def after_round(self, version: str, checkpoint: CheckpointToPublish, result: PublishResult
                    ) -> PublishResult | None:
        """The running canary's look at this round's sessions (its verdict when it decided), then a new canary on
        this round's candidate when it deferred and none runs."""
        if not self.on:
            return None
        if not self._cleared:
            self.publisher.end_canary()
            self._cleared = True
        decided = self._look(checkpoint.evidence.served) if self.canary is not None else None
        if (self.canary is None and result.deferred and result.version == version
                and (decided is None or decided.version != version)):
            self._start(version)
        return decided

    def _champions(self) -> tuple[str | None, str | None]:
        """(what the group's champion alias names, the version serving the group's other sessions)."""
        holder = self.publisher.registry.alias_version(self.publisher.champion_alias)
        return holder, self.publisher.champion_for(holder)

    def _start(self, version: str) -> None:
        publisher = self.publisher
        holder, champion = self._champions()
        if champion is None:
            self.say(f"gate v{version}: no live canary: no champion serves the other sessions")
            return
        publisher.start_canary(version)
        self.canary = Canary(version, champion, int(time.time() * 1000),
                             CanaryTest(CanarySettings.of(publisher.gate)), alias_holder=holder)
        self.say(f"gate v{version}: live canary started on {publisher.canary_alias} against v{champion}"
                 + ("" if holder == champion else f" (the shared champion: {publisher.champion_alias} is not set)"))

    def _look(self, served: Sequence[ServedSession]) -> PublishResult | None:
        canary, publisher = self.canary, self.publisher
        moved = self._champions() != (canary.alias_holder, canary.champion)
        decision = publisher.registry.tags(canary.version).get(names.TAG_GATE_DECISION)
        if moved or decision not in (None, DEFER):
            why = "the champion changed" if moved else f"the gate decided it ({decision})"
            self._end(f"ended, {why}")
            return None
        verdict = canary.take(served)
        said = describe(verdict, canary)
        if verdict.decision == DEFER:
            self.say(f"gate v{canary.version}: {said}")
            return None
        figures = {"canary_pairs": int(verdict.pairs), "canary_change": float(verdict.change),
                   "canary_lower": float(verdict.lower), "canary_upper": float(verdict.upper),
                   "canary_candidate_sessions": canary.sessions.get(canary.version, 0),
                   "canary_champion_sessions": canary.sessions.get(canary.champion, 0),
                   "canary_clipped_sessions": canary.clipped, "reward_decision": str(verdict.decision),
                   "reward_decided_by": f"decided by the {said}"}
        passed = verdict.decision == PASS
        figures["decided_by"] = (f"promoted: decided by the {said}" if passed else f"refused by: decided by the {said}")
        result = publisher.canary_verdict(canary.version, passed, [] if passed else [f"decided by the {said}"],
                                          figures, canary.champion, canary.alias_holder)
        self._end(f"decided: {result.decision}")
        return result

    def _end(self, why: str) -> None:
        canary, self.canary = self.canary, None
        self.publisher.end_canary()
        self.say(f"gate v{canary.version}: live canary {why}; alias {self.publisher.canary_alias} removed")
