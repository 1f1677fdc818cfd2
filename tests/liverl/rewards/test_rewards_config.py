"""The rewards config section: weights merge over defaults, typos fail loudly, everything is overridable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from liverl.config import load_config
from liverl.config.rewards import DEFAULT_WEIGHTS, KNOWN_COMPONENTS, RewardsConfig


def test_setting_one_weight_keeps_the_others():
    config = load_config(overrides=["--rewards.weights", '{"judge": 2.0}'], environ={})
    assert config.rewards.weights == {**DEFAULT_WEIGHTS, "judge": 2.0}


def test_a_misspelt_component_is_an_error_listing_the_known_ones():
    with pytest.raises(ValidationError, match="unknown components \\['judgee'\\]"):
        load_config(overrides=["--rewards.family_weights", '{"coding": {"judgee": 1}}'], environ={})


def test_min_rubrics_cannot_exceed_the_rubrics():
    with pytest.raises(ValidationError, match="min_rubrics"):
        RewardsConfig.model_validate({"judge": {"rubrics": {"a": "?"}, "min_rubrics": 2}})


def test_a_toml_file_sets_schedules_tools_and_thresholds(tmp_path):
    path = tmp_path / "rewards.toml"
    path.write_text(
        '[rewards]\nversion = "rewards-v2"\n'
        '[rewards.tools]\nedit = ["str_replace"]\n'
        '[rewards.parl.lambda1]\nshape = "cosine"\nend_step = 50\n'
        '[rewards.monitors.thresholds."rate.give_up"]\ndirection = "up"\nmax_abs = 0.2\n'
    )
    rewards = load_config(path, environ={}).rewards
    assert rewards.version == "rewards-v2"
    assert rewards.tools.edit == ["str_replace"]
    assert rewards.parl.lambda1.shape == "cosine" and rewards.parl.lambda1.end_step == 50
    assert rewards.monitors.thresholds["rate.give_up"].max_abs == 0.2


def test_every_default_weight_names_a_known_component():
    assert set(DEFAULT_WEIGHTS) <= set(KNOWN_COMPONENTS)
