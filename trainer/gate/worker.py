"""The gate beside training: a registered candidate is judged on a thread while the trainer takes its next steps.

The loop goes on from each candidate whatever its verdict, so only the champion alias waits for the judging (the
held-out scoring and the product's online evaluator). Judging no longer holds the next step: rows committed meanwhile
are trained on at once, which is most of a session's way to serving (trainer.gate.background). Each tenant group has
a worker of its own.

One candidate is judged at a time, in order. A candidate still waiting when a newer one arrives is refused
unjudged ("superseded by vN"): the newer one was trained on everything it was, and more, and judging both would
only let the queue grow. A judged candidate the gate deferred (too little held-out evidence, decision "defer") is
not queued again: it keeps its "defer" tag, the champion stays, and the next candidate, trained on more and judged
on the then most recent held-out sessions, takes its place. The loop collects verdicts between steps (`finished()`): they move the staleness
timeline and the progress line's "blocked" note as a gate in the loop did. `drain()` waits for everything
submitted (the end of a run); a trainer stopped while a candidate waits or is judged leaves it without a
decision, and the next start settles it (CheckpointPublisher.refuse_unjudged: a promotion cut short is finished, an
unjudged candidate refused), so every version carries one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from trainer.io.publish import CheckpointPublisher, CheckpointToPublish, PublishResult


class GateWorker:
    def __init__(self, publisher: CheckpointPublisher, say: Callable[[str], None] = print):
        self.publisher, self.say = publisher, say
        self._changed = threading.Condition()
        self._waiting: tuple[str, CheckpointToPublish] | None = None
        self._judging: tuple[str, CheckpointToPublish] | None = None
        self._results: list[PublishResult] = []
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
            return {checkpoint.folder for _, checkpoint in filter(None, (self._waiting, self._judging))}

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
            self._finish(lambda: self.publisher.decide(version, checkpoint), version)
            with self._changed:
                self._judging = None
                self._changed.notify_all()

    def _finish(self, judge: Callable[[], PublishResult], version: str) -> None:
        try:
            result = judge()
        except Exception as error:  # noqa: BLE001 - e.g. the registry is down: the trainer must go on
            # No decision recorded on the version: the next start settles or refuses it (refuse_unjudged).
            self.say(f"gate v{version} could not finish ({type(error).__name__}: {error}); champion stays")
            result = PublishResult(version, "fail", (f"gate error: {error}",), None)
        with self._changed:
            self._results.append(result)
