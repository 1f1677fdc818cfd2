"""`liverl status` on the real stack: where the loop stands, including the sessions the distiller holds back."""

from __future__ import annotations

import time

from infra.commands import status as status_command
from pipelines.distill import distill_once
from tests.pipelines.conftest import distiller_on
from tests.pipelines.producing import T0, coding_session, produce


def test_status_and_the_progress_line_say_which_horizon_holds_pending_sessions(fresh_topics, tmp_path, capsys):
    config = distiller_on(fresh_topics, tmp_path, "status-pending")
    config.pipelines.reward_horizon_s = 3600.0  # the production default: an hour for late feedback
    seconds_ago = int((time.time() * 1000 - T0) / 1000) - 20
    produce(config, *coding_session("held", t=seconds_ago))  # ended seconds ago

    report = distill_once(config)
    line = report.line()
    assert report.committed and report.sessions == 0, line
    assert "sessions 0 (pending 1, oldest " in line and ", horizon 1h0m)" in line
    assert "| waiting: 1 sessions pend and none can be distilled before 1h0m after its end" in line

    assert status_command.run(config, None) == 0
    out = capsys.readouterr().out
    assert "distiller: 1 sessions pending, the oldest " in out
    assert "held until pipelines.reward_horizon_s 1h0m after their end" in out and "waiting:" in out
