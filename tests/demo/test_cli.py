"""`liverl demo` as a newcomer first types it: the demo's own settings, and a warning when a run cannot train."""

from __future__ import annotations

import pytest


@pytest.fixture
def started(monkeypatch) -> list:
    """The configs `liverl demo` would start the loop with; the loop itself is not started."""
    import demo.run

    seen = []

    def stop_before_starting(config, say):
        seen.append(config)
        raise RuntimeError("stopped by the test")

    monkeypatch.setattr(demo.run, "run_demo", stop_before_starting)
    return seen


def test_liverl_demo_without_a_file_runs_configs_demo_toml(started, capsys):
    from liverl.cli import main

    assert main(["demo", "--minutes", "10"]) == 1
    (config,) = started
    assert config.pipelines.reward_horizon_s == 5.0 and config.demo.duration_s == 600.0
    assert "warning" not in capsys.readouterr().out


def test_a_demo_whose_horizon_outlasts_it_says_why_nothing_will_train(started, capsys):
    from liverl.cli import main

    production = ["--pipelines.reward_horizon_s", "3600", "--pipelines.idle_timeout_s", "7200"]  # the defaults
    assert main(["demo", "--minutes", "10", *production]) == 1
    out = capsys.readouterr().out
    assert "liverl demo: warning: no session can become a trajectory within this run's 10m00s" in out
    assert "pipelines.reward_horizon_s" in out


def test_a_demo_whose_held_out_evaluation_failed_says_it_has_no_evidence_of_a_gain(monkeypatch, capsys):
    import demo.run
    from demo.freshness import Freshness
    from demo.run import DemoResult
    from demo.verdict import judge_rise
    from liverl.cli import main

    def failed_heldout(config, say):
        return DemoResult(None, judge_rise({}, min_sessions=1), Freshness({}, 0), {}, "3", None,
                          heldout_error="the held-out evaluation of base failed (exit 1)")

    monkeypatch.setattr(demo.run, "run_demo", failed_heldout)
    assert main(["demo", "--minutes", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("liverl demo: no held-out evidence of a gain: the held-out evaluation failed (the held-out "
                    "evaluation of base failed (exit 1))")
