"""Delayed feedback: users judge an edit some time after the session ended (seconds in the demo)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class DelayedFeedback:
    """A background thread that runs each scheduled send when its delay has passed.

    A send that raises is counted in `failed` (the product keeps serving); `wait()` returns when
    everything scheduled so far has been sent.
    """

    def __init__(self) -> None:
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._in_flight = 0
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._loop, name="demo-delayed-feedback", daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, send: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("DelayedFeedback is closed; schedule before close()")
            heapq.heappush(self._queue, (time.monotonic() + max(0.0, delay_s), next(self._order), send))
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._in_flight

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until every scheduled send ran; False if timeout_s passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, send_pending: bool = True, timeout_s: float | None = None) -> None:
        """Stop the thread; with send_pending, first wait for what is scheduled (up to timeout_s)."""
        if send_pending:
            self.wait(timeout_s)
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._queue or self._queue[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._queue else self._queue[0][0] - time.monotonic())
                if self._closed:
                    return
                _, _, send = heapq.heappop(self._queue)
                self._in_flight += 1
            try:
                send()
                self.sent += 1
            except Exception:  # noqa: BLE001 - a failed send must not stop the others
                self.failed += 1
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()
