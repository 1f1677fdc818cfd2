"""The gate beside training: a registered candidate is judged on a thread while the trainer takes its next steps.

The loop goes on from each candidate whatever its verdict, so only the champion alias waits for the judging (the
held-out scoring and the product's online evaluator). Judging no longer holds the next step: rows committed meanwhile
are trained on at once, which is most of a session's way to serving (trainer.gate.background). Each tenant group has
a worker of its own.

One candidate is judged at a time, in order. A candidate still waiting when a newer one arrives is refused
unjudged ("superseded by vN"): the newer one was trained on everything it was, and more, and judging both would
only let the queue grow.

A deferred candidate's evidence accumulates. The reward test is sequential and anytime-valid
(trainer/gate/sequential.py): the first candidate the gate defers (too little held-out evidence, decision "defer")
becomes the OPEN test, and on every later round (each newer candidate's judgement brings the then most recent held-out
sessions) it is looked at again, after the newer candidate, on the held-out sessions its accumulator has not consumed:
same candidate, a growing session set, memory bounded by the accumulator (the bets' capital and the consumed session
ids, at most gate.sequential_max_sessions). Each look records its verdict on the version again (publisher.judge: the
report and decision tags are rewritten), so a deferred version may later turn "pass" (promoted) or "fail" (shown
worse, or its session budget spent). One test is open at a time: the one closest to a pass. A newer deferred candidate
whose test has come at least as far toward a pass as the open one (its capital against "worse by max_reward_drop",
Accumulator.pass_capital) takes the open test over; the former one keeps its "defer". Without that, the first
candidate deferred held the test: deferred on 4 held-out sessions early in a run, or looking worse than the champion,
while each newer candidate, trained on more, kept a single look (quiet demos promoted only their least trained
candidate, late, or nothing). Choosing which test goes on never raises a candidate's false-promotion rate: each
candidate's test is valid alone, whenever it is stopped (Ville's inequality bounds the capital's supremum), and
stopping it only gives up its chance to pass. A promotion of any other version ends the open test (its evidence was
about the former champion); the version keeps its last "defer". Looking every round does not raise the false-promotion
rate: that is what the sequential test is for (tests/trainer/test_sequential_gate.py shows the per-round t rule looked
at the same way would). A trainer judging in its own thread (gate.background false) gives each candidate one look.

With trainer.gate.canary_alias set, a deferred candidate is also served live to a share of the sessions and judged on
their outcome (trainer/gate/canary.py): each round, after the open test's look, the canary looks at the round's
sessions; its verdict (pass: promoted, fail: refused) ends the open test of the same version.

The loop collects verdicts between steps (`finished()`): they move the staleness timeline and the progress line's
"blocked" note as a gate in the loop did. `drain()` waits for everything submitted (the end of a run); a trainer
stopped while a candidate waits or is judged leaves it without a decision, and the next start settles it
(CheckpointPublisher.refuse_unjudged: a promotion cut short is finished, an unjudged candidate refused), so every
version carries one; an open test is not saved (a restart leaves its version at "defer").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from liverl.contracts import names
from trainer.gate.canary import LiveCanary
from trainer.gate.sequential import Accumulator, SequentialSettings
from trainer.io.publish import CheckpointPublisher, CheckpointToPublish, PublishResult


@dataclass(frozen=True)
class OpenTest:
    """A deferred candidate whose sequential reward test goes on over later rounds' held-out sessions."""

    version: str
    checkpoint: CheckpointToPublish  # its export folder; evidence.sequential is its accumulator
    champions: tuple[str | None, str | None]  # (its alias's champion, the shared champion) when it was deferred

    @property
    def accumulator(self) -> Accumulator:
        return self.checkpoint.evidence.sequential


class GateWorker:
    def __init__(self, publisher: CheckpointPublisher, say: Callable[[str], None] = print):
        self.publisher, self.say = publisher, say
        self._changed = threading.Condition()
        self._waiting: tuple[str, CheckpointToPublish] | None = None
        self._judging: tuple[str, CheckpointToPublish] | None = None
        self._results: list[PublishResult] = []
        self._open: OpenTest | None = None  # the deferred candidate looked at again every round
        self._canary = LiveCanary(publisher, say)  # a deferred candidate served live (trainer.gate.canary_alias)
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="gate")
        self._thread.start()

    def submit(self, version: str, checkpoint: CheckpointToPublish) -> None:
        """Judge this registered candidate next; one still waiting is superseded by it."""
        with self._changed:
            superseded, self._waiting = self._waiting, (version, checkpoint)
            self._changed.notify_all()
        if superseded is not None:
            self._finish(lambda: self.publisher.refuse(superseded[0], f"superseded by v{version} before its turn"),
                         superseded[0])

    def finished(self) -> list[PublishResult]:
        """The verdicts reached since the last call, in order."""
        with self._changed:
            results, self._results = self._results, []
        return results

    def in_use(self) -> set[Path]:
        """Export folders a waiting or running judgement still reads (pruning must keep them)."""
        with self._changed:
            folders = {checkpoint.folder for _, checkpoint in filter(None, (self._waiting, self._judging))}
            return folders | ({self._open.checkpoint.folder} if self._open is not None else set())

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted candidate has its verdict; False when timeout_s passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._waiting is None and self._judging is None, timeout_s)

    def close(self) -> None:
        """No further judging; a judgement running now finishes on its own (the thread is a daemon)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._waiting is not None or self._closed)
                if self._closed:
                    return
                self._judging, self._waiting = self._waiting, None
            version, checkpoint = self._judging
            settings = SequentialSettings.of(self.publisher.gate)
            if settings.testing:  # this candidate's own sequential test, first look
                checkpoint = replace(checkpoint, evidence=replace(checkpoint.evidence,
                                                                  sequential=Accumulator(settings)))
            result = self._finish(lambda: self.publisher.decide(version, checkpoint), version)
            self._look_again(checkpoint)
            self._canary_round(version, checkpoint, result)
            newer = checkpoint.evidence.sequential
            if result.deferred and newer is not None and newer.looks and self._takes_over(newer):
                champions = self._champions()
                if champions is not None:
                    if self._open is not None:
                        opened = self._open.accumulator
                        self.say(f"gate v{version}: its sequential test goes on instead of v{self._open.version}'s, "
                                 f"which stays deferred (log capital toward a pass {newer.pass_capital():.2f} on "
                                 f"{len(newer.seen)} sessions against {opened.pass_capital():.2f} on "
                                 f"{len(opened.seen)})")
                    self._open = OpenTest(version, checkpoint, champions)
            with self._changed:
                self._judging = None
                self._changed.notify_all()

    def _takes_over(self, newer: Accumulator) -> bool:
        """Whether a newer deferred candidate's test becomes the open one: none is open, or it has come at least as
        far toward a pass (module docstring)."""
        return self._open is None or newer.pass_capital() >= self._open.accumulator.pass_capital()

    def _champions(self) -> tuple[str | None, str | None] | None:
        """(the alias's champion, the shared one); None when the registry cannot say (the open test waits)."""
        registry = self.publisher.registry
        try:
            return registry.alias_version(self.publisher.champion_alias), registry.alias_version(names.ALIAS_CHAMPION)
        except Exception as error:  # noqa: BLE001 - the registry is down: the trainer must go on
            self.say(f"gate: cannot read the champion ({type(error).__name__}: {error}); the sequential test waits")
            return None

    def _look_again(self, latest: CheckpointToPublish) -> None:
        """The open test's next look, on the held-out sessions of the latest round it has not consumed."""
        test = self._open
        if test is None:
            return
        champions = self._champions()
        if champions is None:
            return
        if champions != test.champions:  # promoted meanwhile: the evidence was about the former champion
            self.say(f"gate v{test.version}: sequential test ended after {test.accumulator.looks} looks, the champion "
                     "changed; it stays deferred")
            self._open = None
            return
        fresh = test.accumulator.new_sessions([t.trajectory_id for t in latest.evidence.holdout])
        if not fresh:
            return  # nothing new to look at: not a look
        again = replace(test.checkpoint, evidence=replace(latest.evidence, sequential=test.accumulator))
        result = self._finish(lambda: self.publisher.judge(test.version, again), test.version)
        if not result.deferred:
            self._open = None

    def _canary_round(self, version: str, checkpoint: CheckpointToPublish, result: PublishResult) -> None:
        """The live canary's look at this round's sessions, and a new one on this candidate if it deferred."""
        try:
            decided = self._canary.after_round(version, checkpoint, result)
        except Exception as error:  # noqa: BLE001 - the registry is down: the trainer must go on
            self.say(f"gate: the live canary could not look ({type(error).__name__}: {error}); it looks again next "
                     "round")
            return
        if decided is not None:
            with self._changed:
                self._results.append(decided)
            if self._open is not None and self._open.version == decided.version:
                self._open = None  # decided: no more off-policy looks

    def _finish(self, judge: Callable[[], PublishResult], version: str) -> PublishResult:
        try:
            result = judge()
        except Exception as error:  # noqa: BLE001 - e.g. the registry is down: the trainer must go on
            # No decision recorded on the version: the next start settles or refuses it (refuse_unjudged).
            self.say(f"gate v{version} could not finish ({type(error).__name__}: {error}); champion stays")
            result = PublishResult(version, "fail", (f"gate error: {error}",), None)
        with self._changed:
            self._results.append(result)
        return result
