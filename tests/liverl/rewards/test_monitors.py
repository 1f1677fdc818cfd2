"""Monitors per policy version and the drift report between a candidate and the champion."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from liverl.config.rewards import DriftThreshold
from liverl.contracts.table_schema import TRAJECTORY_SCHEMA
from liverl.rewards import drift_report, label, version_monitors
from tests.liverl.rewards.session_builder import SessionBuilder


def row(config, versions, broken=0, asks=False, family="coding"):
    s = SessionBuilder(family)
    if asks:
        s.act("ask_user", {"q": "?"})
    else:
        s.act("edit", {"f": "a"})
    for i in range(broken):
        s.act("edit", {"i": i}, valid=False)
    s.outcome(success=not asks)
    got = label(s.build(), "main", config)
    return {"signals": got.signals, "reward_components": got.components, "critical_steps": got.critical_steps,
            "policy_versions": versions, "task_family": family}


def test_figures_per_version_hand_computed(config):
    rows = [row(config, ["1"]), row(config, ["1"], broken=2), row(config, ["1", "2"], asks=True)]
    figures = version_monitors(rows)
    assert set(figures) == {"1", "2"}  # a row counts for the version that finished it
    one = figures["1"]
    assert one["n"] == 2
    assert one["rate.broken_tool_calls"] == pytest.approx(2 / 4)  # 2 broken of 4 tool calls
    assert one["mean.edits"] == pytest.approx(1.0)
    assert one["mean.turns"] == pytest.approx(2.0)
    assert one["component.outcome"] == 1.0
    assert one["component.broken_tool_calls"] == pytest.approx(-0.25)
    assert figures["2"]["rate.clarifying"] == 1.0 and figures["2"]["rate.give_up"] == 1.0


def test_rows_read_back_from_the_table_schema_work(config):
    rows = [row(config, ["3"], broken=1)]
    table_rows = pa.Table.from_pylist(
        [{"signals": r["signals"], "reward_components": r["reward_components"], "critical_steps": r["critical_steps"],
          "policy_versions": r["policy_versions"]} for r in rows],
        schema=pa.schema([TRAJECTORY_SCHEMA.field(n) for n in
                          ("signals", "reward_components", "critical_steps", "policy_versions")]),
    ).to_pylist()  # maps come back as lists of (key, value) pairs
    assert version_monitors(table_rows)["3"] == version_monitors(rows)["3"]


def test_subagents_per_task_over_orchestrator_rows(config):
    s = SessionBuilder("orchestrator", role="orchestrator")
    s.model_call()
    for sub in "ab":
        s.task_assigned(sub, "t" + sub, stage=0)
        s.subagent_finished(sub, "t" + sub, success=True, steps=2)
    got = label(s.build(), "main", config)
    rows = [{"signals": got.signals, "reward_components": got.components, "critical_steps": got.critical_steps,
             "policy_versions": ["1"], "task_family": "orchestrator"}, row(config, ["1"])]
    figures = version_monitors(rows)["1"]
    assert figures["mean.subagents_per_task"] == 2.0  # the coding row is not an orchestrator task
    assert figures["mean.critical_steps"] == pytest.approx((3 + 1) / 2)


def test_a_hacking_candidate_is_flagged_and_a_steady_one_is_not(config):
    champion = version_monitors([row(config, ["1"]) for _ in range(10)])["1"]
    steady = version_monitors([row(config, ["2"]) for _ in range(10)])["2"]
    report = drift_report(steady, champion, config.monitors)
    assert report.ok and report.flags == []
    hacking = version_monitors([row(config, ["3"], broken=1) for _ in range(8)]
                               + [row(config, ["3"], asks=True) for _ in range(2)])["3"]
    report = drift_report(hacking, champion, config.monitors)
    assert not report.ok
    flagged = {f["figure"] for f in report.flags}
    assert {"rate.broken_tool_calls", "rate.clarifying", "rate.give_up", "component.outcome"} <= flagged
    decoded = json.loads(report.to_json())  # what the trainer logs to MLflow
    assert decoded["ok"] is False
    assert decoded["figures"]["rate.clarifying"] == {"candidate": 0.2, "champion": 0.0, "delta": 0.2}


def test_direction_and_relative_thresholds():
    thresholds = {"mean.turns": DriftThreshold(direction="both", max_rel=0.5),
                  "rate.broken_tool_calls": DriftThreshold(direction="up", max_abs=0.05)}
    fewer_broken = drift_report({"mean.turns": 10.0, "rate.broken_tool_calls": 0.0},
                                {"mean.turns": 10.0, "rate.broken_tool_calls": 0.5}, thresholds)
    assert fewer_broken.ok  # improvements are not drift
    halved = drift_report({"mean.turns": 4.0}, {"mean.turns": 10.0}, thresholds)
    assert [f["figure"] for f in halved.flags] == ["mean.turns"]


def test_a_proxy_flags_only_while_the_verified_outcome_does_not_rise_with_it(config):
    champion = {"n": 10.0, "mean.subagents_per_task": 2.0, "rate.broken_tool_calls": 0.1, "component.outcome": 0.5}
    with_outcome = drift_report({"n": 10.0, "mean.subagents_per_task": 3.3, "rate.broken_tool_calls": 0.1,
                                 "component.outcome": 0.7}, champion, config.monitors)
    assert with_outcome.ok and any("mean.subagents_per_task" in note and "with the verified outcome" in note
                                   for note in with_outcome.notes)
    for outcome in (0.5, 0.45):  # stays, falls (within the outcome's own threshold)
        without = drift_report({"n": 10.0, "mean.subagents_per_task": 3.3, "rate.broken_tool_calls": 0.1,
                                "component.outcome": outcome}, champion, config.monitors)
        assert [flag["figure"] for flag in without.flags] == ["mean.subagents_per_task"]


def test_no_champion_and_too_few_trajectories(config):
    candidate = version_monitors([row(config, ["1"]) for _ in range(5)])["1"]
    first = drift_report(candidate, None, config.monitors)
    assert first.ok and first.notes
    assert config.monitors.min_trajectories == 5  # the default means something: one trajectory is too few
    one = version_monitors([row(config, ["1"])])["1"]
    scarce = drift_report(one, one, config.monitors)
    assert not scarce.ok and "insufficient_data" in scarce.flags[0]["reason"]


def test_report_metrics_are_flat_floats_for_mlflow(config):
    champion = version_monitors([row(config, ["1"])])["1"]
    candidate = version_monitors([row(config, ["2"], broken=1)])["2"]
    metrics = drift_report(candidate, champion, config.monitors).metrics()
    assert metrics["drift.ok"] == 0.0
    assert metrics["drift.rate.broken_tool_calls.candidate"] == pytest.approx(0.5)
    assert all(isinstance(v, float) for v in metrics.values())


def test_critical_steps_budget_is_a_monitored_rate(config):
    config.parl.critical_steps_budget = 1
    rows = [row(config, ["1"]), row(config, ["1"], broken=2)]  # 1 and 3 critical steps
    assert version_monitors(rows)["1"]["rate.critical_steps_over_budget"] == 0.5
