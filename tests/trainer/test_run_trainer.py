"""The kill-and-resume tests' runner (tests/trainer/conftest.py run_trainer) keeps every line the trainer wrote
before it was killed: a step and its checkpoint can land between the line that triggers the kill and the kill."""

from __future__ import annotations

import sys

from tests.trainer.conftest import run_trainer

# One write: by the time the runner reads the trigger, the line after it is already in the pipe.
CHILD = ("import sys, time; sys.stdout.write('version 2 registered\\ntrained ids | step 3\\n'); sys.stdout.flush(); "
         "time.sleep(60)")


def test_lines_written_before_the_kill_are_kept():
    lines = run_trainer([sys.executable, "-c", CHILD], kill_after="version 2 registered", timeout_s=30)
    assert lines == ["version 2 registered", "trained ids | step 3"]
