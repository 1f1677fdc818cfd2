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
version carries one.

The open test is saved after every round that changed it (`state_file`, JSON written atomically: the version, its
folder, the champions, the accumulator's capital and consumed session ids) and taken up again by the next start, so a
restart costs the test no evidence. Going on is valid: the capital is the same supermartingale paused, and the
consumed ids keep every session to one use. It is taken up only while it still is what it was: the version still
deferred and registered for the same checkpoint, the same champions, the same gate settings; otherwise the start
says why it is dropped (the version keeps its "defer").
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from liverl.contracts import names
from trainer.gate.canary import LiveCanary
from trainer.gate.sequential import Accumulator, SequentialSettings
from trainer.io.publish import CheckpointPublisher, CheckpointToPublish, PublishResult
from trainer.io.registry import TAG_CHECKPOINT


@dataclass(frozen=True)
class OpenTest:
    """A deferred candidate whose sequential reward test goes on over later rounds' held-out sessions."""

    version: str
    folder: Path  # its export folder (a restart: downloaded from the registry when it was pruned)
    champions: tuple[str | None, str | None]  # (its alias's champion, the shared champion) when it was deferred
    accumulator: Accumulator  # its sequential test's evidence, updated in place by each look
    registered_as: str | None  # the version's checkpoint tag: a restart takes the test up only for the same one

    def state(self) -> dict:
        return {"version": self.version, "folder": str(self.folder), "champions": list(self.champions),
                "registered_as": self.registered_as, "accumulator": self.accumulator.state()}


class GateWorker:
    def __init__(self, publisher: CheckpointPublisher, say: Callable[[str], None] = print,
                 state_file: Path | None = None):
        """state_file: where the open test is saved for the next start (None: not saved)."""
        self.publisher, self.say = publisher, say
        self._state_file = state_file
        self._changed = threading.Condition()
        self._waiting: tuple[str, CheckpointToPublish] | None = None
        self._judging: tuple[str, CheckpointToPublish] | None = None
        self._results: list[PublishResult] = []
        self._open: OpenTest | None = self._taken_up()  # the deferred candidate looked at again every round
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
            return folders | ({self._open.folder} if self._open is not None else set())

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
            judged_against = self._champions(quiet=True)  # its test opens only while these still are the champions
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
                if champions is not None and champions != judged_against:
                    self.say(f"gate v{version}: its sequential test does not go on, the champion changed while it "
                             "was judged; it stays deferred")
                elif champions is not None:
                    if self._open is not None:
                        opened = self._open.accumulator
                        self.say(f"gate v{version}: its sequential test goes on instead of v{self._open.version}'s, "
                                 f"which stays deferred (log capital toward a pass {newer.pass_capital():.2f} on "
                                 f"{len(newer.seen)} sessions against {opened.pass_capital():.2f} on "
                                 f"{len(opened.seen)})")
                    self._open = OpenTest(version, checkpoint.folder, champions, newer,
                                          self._registered_as(version))
            self._save_open()
            with self._changed:
                self._judging = None
                self._changed.notify_all()

    def _takes_over(self, newer: Accumulator) -> bool:
        """Whether a newer deferred candidate's test becomes the open one: none is open, or it has come at least as
        far toward a pass (module docstring)."""
        return self._open is None or newer.pass_capital() >= self._open.accumulator.pass_capital()

    def _champions(self, quiet: bool = False) -> tuple[str | None, str | None] | None:
        """(the alias's champion, the shared one); None when the registry cannot say (the open test waits)."""
        registry = self.publisher.registry
        try:
            return registry.alias_version(self.publisher.champion_alias), registry.alias_version(names.ALIAS_CHAMPION)
        except Exception as error:  # noqa: BLE001 - the registry is down: the trainer must go on
            if not quiet:
                self.say(f"gate: cannot read the champion ({type(error).__name__}: {error}); the sequential test "
                         "waits")
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
        again = replace(latest, folder=test.folder, evidence=replace(latest.evidence, sequential=test.accumulator))
        result = self._finish(lambda: self.publisher.judge(test.version, again), test.version)
        if not result.deferred:
            self._open = None

    def _registered_as(self, version: str) -> str | None:
        try:
            return self.publisher.registry.tags(version).get(TAG_CHECKPOINT)
        except Exception:  # noqa: BLE001 - the registry is down: the test goes on, a restart will not take it up
            return None

    def _save_open(self) -> None:
        """The open test as it stands, for the next start (written whole, then renamed: never half a file)."""
        if self._state_file is None:
            return
        try:
            if self._open is None:
                self._state_file.unlink(missing_ok=True)
                return
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            partial = self._state_file.with_name(self._state_file.name + ".partial")
            partial.write_text(json.dumps(self._open.state()))
            os.replace(partial, self._state_file)
        except OSError as error:
            self.say(f"gate: the open sequential test could not be saved ({error}); a restart would not take it up")

    def _taken_up(self) -> OpenTest | None:
        """The open test a previous start saved, if it still is what it was (module docstring); None otherwise."""
        if self._state_file is None or not self._state_file.exists():
            return None
        version = "?"
        try:
            saved = json.loads(self._state_file.read_text())
            version = str(saved["version"])
            accumulator = Accumulator.from_state(saved["accumulator"], SequentialSettings.of(self.publisher.gate))
            why = self._why_not_taken_up(version, saved)
            folder = Path(saved["folder"])
            if why is None and not folder.exists():  # pruned: the registry has the version's weights
                from trainer.io.policy_io import download_policy

                folder = download_policy(self.publisher.registry, version, self.publisher.download_dir)
        except Exception as error:  # noqa: BLE001 - unreadable, other settings, the registry down: start without
            why = f"{type(error).__name__}: {error}"
        if why is not None:
            self.say(f"gate v{version}: its saved sequential test is not taken up ({why}); the version stays deferred")
            self._state_file.unlink(missing_ok=True)
            return None
        self.say(f"gate v{version}: sequential test taken up after a restart ({accumulator.looks} looks, "
                 f"{len(accumulator.seen)} sessions, log capital toward a pass {accumulator.pass_capital():.2f})")
        return OpenTest(version, folder, tuple(saved["champions"]), accumulator, saved["registered_as"])

    def _why_not_taken_up(self, version: str, saved: dict) -> str | None:
        tags = self.publisher.registry.tags(version)
        if tags.get(names.TAG_GATE_DECISION) != "defer":
            return "the version is no longer deferred"
        if tags.get(TAG_CHECKPOINT) != saved["registered_as"]:
            return "the version was registered for another checkpoint"
        champions = self._champions(quiet=True)
        if champions is None:
            return "the registry cannot say who the champion is"
        if champions != tuple(saved["champions"]):
            return "the champion changed"
        return None

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
