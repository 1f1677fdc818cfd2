"""The audit off the distiller's critical path: `liverl distill --follow` audits committed batches on a thread.

    main thread     plan -> Beam graph -> commit -> submit(seq) -> plan the next batch at once
    audit thread    AuditBacklog.audit_through(latest submitted seq): oldest unaudited batch first

The trainer already sees a batch at its commit; only the MLflow run and traces come later. A failed audit
(MLflow down) is logged and counted and retried at the next submit or after retry_s; distillation goes on,
and prune keeps the staging folders of unaudited batches (their trace sources) until the audit is done.
Stopping (Ctrl-C, SIGTERM) lets the batch being audited finish within a grace period; one cut short is
audited again at the next start (a partial run is replaced, traces have fixed ids).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from liverl.config import LiverlConfig
from pipelines import table
from pipelines.audit import AuditBacklog
from pipelines.state import StateStore


class AuditFollower:
    """distill_once's `auditor` in follow mode: submit() returns at once, the thread audits."""

    def __init__(self, config: LiverlConfig, store: StateStore, retry_s: float = 30.0,
                 audit_batch: Callable[[table.Committed], object] | None = None):
        self.backlog = AuditBacklog(config, store, audit_batch)
        self.retry_s = retry_s
        self.failures = 0  # failed audit attempts since start
        self._submitted = 0
        self._begun = 0  # attempts begun
        self._last_failed = 0  # the number of the last attempt that failed (drain: one begun after it began)
        self._poked = False  # a submit since the last failure: retry now instead of after retry_s
        self._retry_at = 0.0
        self._stopping = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="liverl-audit", daemon=True)
        self._thread.start()

    def submit(self, committed_seq: int) -> None:
        with self._changed:
            self._submitted = max(self._submitted, committed_seq)
            self._poked = True
            self._changed.notify_all()

    def audited_seq(self) -> int:
        """Every batch up to this one is audited (0 until the thread has looked)."""
        return self.backlog.audited_seq()

    def lag(self) -> int:
        """Committed batches submitted but not audited yet."""
        return max(0, self._submitted - self.audited_seq())

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted batch is audited or an attempt begun now failed; True when caught up."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            self._poked = True  # no retry pause: try now
            self._changed.notify_all()
            started = self._begun
            while self.lag() and self._thread.is_alive():
                if self._last_failed > started:  # an attempt begun after the drain began has failed
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return not self.lag()

    def stop(self, grace_s: float = 10.0) -> None:
        """No new batch is begun; the one being audited may finish within grace_s, else the next start redoes it."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(grace_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopping and not self._due():
                    self._changed.wait(None if not self.lag() else max(0.01, self._retry_at - time.monotonic()))
                if self._stopping:
                    return
                target, self._poked = self._submitted, False
                self._begun += 1
                attempt = self._begun
            try:
                self.backlog.audit_through(target, stopping=lambda: self._stopping)
            except Exception as error:  # MLflow down, a bad batch: distillation goes on; the next try resumes
                self.failures += 1
                self._last_failed = attempt
                self._retry_at = time.monotonic() + self.retry_s
                print(f"audit failed ({self.failures} failures so far, {self.lag()} batches waiting; retrying at "
                      f"the next batch or in {self.retry_s:.0f}s): {error}", file=sys.stderr, flush=True)
            with self._changed:
                self._changed.notify_all()

    def _due(self) -> bool:
        return bool(self.lag()) and (self._poked or time.monotonic() >= self._retry_at)
