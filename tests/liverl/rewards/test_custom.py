"""A team's own reward functions (rewards.custom): labelled, bounded, versioned, weighted, monitored, and failures
flagged on the trajectory instead of crashing labelling or reading as 0."""

from __future__ import annotations

import inspect
import logging
import re
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from liverl.config.rewards import DriftThreshold, RewardsConfig
from liverl.rewards import custom, drift_report, label, mix, version_monitors
from liverl.rewards.examples import tool_success
from tests.liverl.rewards.session_builder import SessionBuilder

DOCS = Path(__file__).resolve().parents[3] / "docs" / "rewards.md"
RELEASE = threading.Event()  # lets the hanging function's abandoned threads end when the test is over


def docs_example() -> tuple[dict, str]:
    """The TOML and Python blocks of docs/rewards.md's "Your own reward", verbatim."""
    text = DOCS.read_text().split("## Your own reward", 1)[1]
    toml = re.search(r"^```toml\n(.*?)^```", text, flags=re.S | re.M).group(1)
    python = re.search(r"^```python\n(.*?)^```", text, flags=re.S | re.M).group(1)
    return tomllib.loads(toml), python


def docs_config(**extra) -> RewardsConfig:
    return RewardsConfig.model_validate({**docs_example()[0]["rewards"], **extra})


def session(broken: int = 1, edits: int = 3):
    s = SessionBuilder("coding")
    for i in range(edits):
        s.act("edit", {"file": f"f{i}.py"})
    for i in range(broken):
        s.act("edit", {"i": i}, valid=False)
    s.outcome(success=True)
    s.end()
    return s.build()


# Functions the entries below name by import path (this module is importable as tests.liverl.rewards.test_custom).
def explodes(view):
    raise ZeroDivisionError("scorer bug")


def hangs(view):
    RELEASE.wait(30)
    return {"score": 1.0}


def returns(view, *, value=0.5, name="score"):
    return {name: value}


def entry(function: str, **settings) -> dict:
    return {"function": f"tests.liverl.rewards.test_custom:{function}", "components": ["score"], **settings}


def test_the_docs_example_is_labelled_as_a_bounded_component_with_its_own_version():
    config = docs_config()
    got = label(session(broken=1, edits=3), "main", config)
    assert got.components["custom.tool_success.rate"] == pytest.approx(3 / 4)  # 3 of 4 tool calls worked
    assert got.components["outcome"] == 1.0  # the built-ins are untouched
    assert got.signals["custom.failed"] == 0.0 and got.signals["custom.tool_success.failed"] == 0.0
    base = RewardsConfig().version
    assert got.config_version.startswith(f"{base}+custom-")
    assert label(session(), "main", RewardsConfig()).config_version == base
    no_tools = SessionBuilder()
    no_tools.model_call()
    no_tools.end()
    assert "custom.tool_success.rate" not in label(no_tools.build(), "main", config).components  # absent, not 0
    # the docs show the example's code as shipped
    source = inspect.getsource(tool_success)
    assert all(line.strip() in source for line in docs_example()[1].splitlines() if line.strip())


def test_the_version_follows_the_function_source_and_settings(tmp_path, monkeypatch):
    module = tmp_path / "team_reward_v.py"
    module.write_text("def score(view):\n    return {'score': 0.5}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = RewardsConfig.model_validate({"custom": {"team": {"function": "team_reward_v:score",
                                                               "components": ["score"]}}})
    first = custom.reward_version(config)
    assert custom.reward_version(config) == first  # stable
    module.write_text("def score(view):\n    return {'score': 0.25}  # a changed scorer\n")
    custom._load.cache_clear()
    sys.modules.pop("team_reward_v")
    edited = custom.reward_version(config)
    assert edited != first and label(session(), "main", config).components["custom.team.score"] == 0.25
    config.custom["team"].bounds = (0.0, 1.0)
    assert custom.reward_version(config) not in (first, edited)
    sys.modules.pop("team_reward_v")


def test_an_exception_is_a_counted_flag_and_a_log_line_not_a_crash_or_a_zero(caplog):
    config = docs_config(custom={**docs_example()[0]["rewards"]["custom"], "buggy": entry("explodes")})
    with caplog.at_level(logging.WARNING, logger="liverl.rewards.custom"):
        got = label(session(), "main", config)
    assert "custom.buggy.score" not in got.components  # absent, never a silent 0
    assert got.components["custom.tool_success.rate"] == pytest.approx(3 / 4)  # the other entry still counts
    assert got.signals["custom.buggy.failed"] == 1.0 and got.signals["custom.buggy.timed_out"] == 0.0
    assert got.signals["custom.failed"] == 1.0
    (record,) = [r for r in caplog.records if "buggy" in r.getMessage()]
    assert "ZeroDivisionError" in record.getMessage() and "session s-1" in record.getMessage()


def test_a_timeout_is_flagged_and_labelling_goes_on():
    config = RewardsConfig.model_validate({"custom": {"slow": entry("hangs", timeout_s=0.2)}})
    try:
        began = time.monotonic()
        got = label(session(), "main", config)
        assert time.monotonic() - began < 5
        assert "custom.slow.score" not in got.components
        assert got.signals["custom.slow.timed_out"] == 1.0 and got.signals["custom.failed"] == 1.0
        for _ in range(custom.MAX_ABANDONED + 2):  # a function hanging every time stops being called
            assert label(session(), "main", config).signals["custom.slow.timed_out"] == 1.0
        assert len([t for t in threading.enumerate() if t.name == "liverl-custom-reward-slow"]) <= custom.MAX_ABANDONED
    finally:
        RELEASE.set()


@pytest.mark.parametrize(("settings", "components", "signals"), [
    ({"kwargs": {"value": 3.0}}, {"custom.x.score": 1.0}, {"custom.x.clipped": 1.0, "custom.failed": 0.0}),
    ({"kwargs": {"value": -0.5}, "bounds": [0.0, 1.0]}, {"custom.x.score": 0.0}, {"custom.x.clipped": 1.0}),
    ({"kwargs": {"value": 3.0}, "out_of_bounds": "fail"}, {}, {"custom.x.failed": 1.0}),
    ({"kwargs": {"value": float("nan")}}, {}, {"custom.x.failed": 1.0}),
    ({"kwargs": {"value": "high"}}, {}, {"custom.x.failed": 1.0}),
    ({"kwargs": {"name": "typo"}}, {}, {"custom.x.failed": 1.0}),
])
def test_returned_values_are_declared_finite_and_bounded(settings, components, signals):
    config = RewardsConfig.model_validate({"custom": {"x": entry("returns", **settings)}})
    got = label(session(), "main", config)
    assert {k: v for k, v in got.components.items() if k.startswith("custom.")} == components
    assert signals.items() <= got.signals.items()


def test_custom_components_are_weighted_like_the_built_ins():
    config = docs_config()
    components = label(session(broken=1, edits=3), "main", config).components
    unweighted = {k: v for k, v in components.items() if not k.startswith("custom.")}
    assert mix(components, "coding", 0, config) == pytest.approx(mix(unweighted, "coding", 0, config) + 0.5 * 0.75)
    config.family_weights["coding"] = {"custom.tool_success.rate": 2.0}
    assert mix(components, "coding", 0, config) == pytest.approx(mix(unweighted, "coding", 0, config) + 2.0 * 0.75)
    with pytest.raises(ValidationError, match=r"custom.tool_success.typo"):
        docs_config(weights={"custom.tool_success.typo": 1.0})


def test_custom_components_and_their_failures_are_monitored():
    config = docs_config(custom={**docs_example()[0]["rewards"]["custom"], "buggy": entry("explodes")})
    healthy = docs_config()

    def row(cfg, version, broken):
        got = label(session(broken=broken, edits=2), "main", cfg)
        return {"signals": got.signals, "reward_components": got.components, "critical_steps": got.critical_steps,
                "policy_versions": [version]}

    figures = version_monitors([row(healthy, "1", 0)] * 4 + [row(config, "2", 2)] * 4)
    assert figures["1"]["component.custom.tool_success.rate"] == 1.0
    assert figures["2"]["component.custom.tool_success.rate"] == pytest.approx(0.5)
    assert figures["1"]["rate.custom_failed"] == 0.0 and figures["2"]["rate.custom_failed"] == 1.0
    monitors = config.monitors.model_copy(deep=True)
    monitors.thresholds["component.custom.tool_success.rate"] = DriftThreshold(direction="down", max_abs=0.1)
    report = drift_report(figures["2"], figures["1"], monitors)
    assert {flag["figure"] for flag in report.flags} >= {"component.custom.tool_success.rate", "rate.custom_failed"}


def test_an_entry_that_cannot_be_used_says_what_to_do():
    with pytest.raises(ValidationError, match="package.module:function"):
        RewardsConfig.model_validate({"custom": {"x": {"function": "not a path", "components": ["a"]}}})
    config = RewardsConfig.model_validate({"custom": {"x": {"function": "no_such_team_module:score",
                                                            "components": ["a"]}}})
    with pytest.raises(custom.CustomRewardError, match="does not import.*install it where the pipelines run"):
        label(session(), "main", config)
    config.custom["x"].function = "liverl.rewards.examples.tool_success:missing"
    with pytest.raises(custom.CustomRewardError, match="has no 'missing'"):
        custom.reward_version(config)
