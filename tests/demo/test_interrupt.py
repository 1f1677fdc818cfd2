"""SIGTERM or Ctrl-C during `liverl demo`: the first one during the traffic ends the traffic (the summary and the
stages' stop still run); before the traffic, or a second time, it raises KeyboardInterrupt."""

import os
import signal
import time

import pytest

from demo.interrupt import interrupt_handling


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs in the main thread at the next bytecode boundary


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_in_the_traffic_ends_the_traffic_and_a_second_one_the_demo(signum):
    lines = []
    with interrupt_handling(lines.append) as interrupt:
        with interrupt.traffic() as stop:
            _signal_self(signum)
            assert stop.is_set()
            with pytest.raises(KeyboardInterrupt):
                _signal_self(signum)
    assert "ending the traffic" in lines[0]
    assert signal.getsignal(signum) is not interrupt.handle  # the previous handler is back


def test_a_signal_outside_the_traffic_stops_at_once():
    with interrupt_handling(lambda line: None):
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _signal_self(signal.SIGTERM)
