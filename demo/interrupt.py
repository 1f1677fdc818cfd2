"""Ctrl-C or SIGTERM during `liverl demo`: end the traffic early and still summarise and stop every stage.

Without this, SIGTERM killed the demo outright and left its stage processes and the stack running. The first
signal during the traffic phase ends the traffic (sessions in flight finish), then the summary runs as usual; a
signal before the traffic or a second one raises KeyboardInterrupt, which still stops everything started.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager


class DemoInterrupt:
    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.stop_traffic = threading.Event()  # handed to the traffic loop
        self.in_traffic = False

    def handle(self, signum, frame) -> None:
        if self.in_traffic and not self.stop_traffic.is_set():
            self.stop_traffic.set()
            self.say(f"      {signal.Signals(signum).name}: ending the traffic, then the summary "
                     f"(again to stop at once)")
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextmanager
    def traffic(self):
        """The traffic phase: a signal inside it ends the traffic instead of the demo."""
        self.in_traffic = True
        try:
            yield self.stop_traffic
        finally:
            self.in_traffic = False


@contextmanager
def interrupt_handling(say: Callable[[str], None]):
    """Install DemoInterrupt for SIGINT and SIGTERM (main thread only: elsewhere signals are not ours)."""
    interrupt = DemoInterrupt(say)
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return
    previous = {sig: signal.signal(sig, interrupt.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupt
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
