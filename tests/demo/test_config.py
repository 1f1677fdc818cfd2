"""configs/demo-smollm2.toml: the real model is a config switch; `make demo` runs it, the toy is `make demo-toy`."""

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from demo.config import DemoLiverlConfig
from liverl.config.loading import load_config

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, *overrides: str) -> DemoLiverlConfig:
    return load_config(ROOT / "configs" / name, overrides, environ={}, schema=DemoLiverlConfig)


def test_smollm2_config_switches_the_policy_and_fits_the_real_prompts():
    config = _load("demo-smollm2.toml")
    assert config.demo.policy == "smollm2" and config.demo.real.heldout_tasks > 0
    assert not config.trainer.gate.online_eval_command, "the toy product's evaluator plays toy tasks"
    assert config.serving.max_model_len >= 1024 and config.trainer.max_seq_len >= config.serving.max_model_len
    assert (config.demo.temperature, config.demo.real.top_p) == (0.7, 0.9), "the held-out evaluation's sampling"


def test_smollm2_config_trains_and_serves_adapters_and_watches_general_text():
    config = _load("demo-smollm2.toml")
    assert config.trainer.lora.enabled and config.serving.lora.enabled
    assert config.trainer.lora.rank <= config.serving.lora.max_lora_rank
    assert (ROOT / config.trainer.gate.general_text_file).is_file()
    assert config.trainer.gate.max_general_nll_increase == 0.05


def test_make_demo_runs_the_real_model_and_the_toy_stays_a_setting():
    targets = dict(re.findall(r"^([\w-]+): install\n\t\$\(VENV\)/bin/liverl demo @ (\S+)$", (ROOT / "Makefile").read_text(),
                              re.M))
    assert _load(Path(targets["demo"]).name).demo.policy == "smollm2"
    assert _load(Path(targets["demo-toy"]).name).demo.policy == "toy"
    assert _load("demo.toml").demo.policy == "toy", "`liverl demo` and the fast tests run the toy"


def test_unknown_policy_and_unbounded_heldout_are_refused():
    with pytest.raises(ValidationError, match="policy"):
        _load("demo.toml", "--demo.policy", "gpt")
    with pytest.raises(ValidationError, match="heldout_tasks"):
        _load("demo-smollm2.toml", "--demo.real.heldout_tasks", "100000")


def test_an_experiment_names_its_split_and_draw_and_nothing_else_is_taken():
    config = _load("demo-smollm2.toml", "--demo.real.heldout_split", "dev", "--demo.real.training_draw", "template")
    assert (config.demo.real.heldout_split, config.demo.real.training_draw) == ("dev", "template")
    assert (_load("demo-smollm2.toml").demo.real.heldout_split, _load("demo-smollm2.toml").demo.real.training_draw) \
        == ("final", "key")  # unset: the final split, key by key, as series A and B ran
    for setting, value in (("heldout_split", "training"), ("heldout_split", ""), ("training_draw", "")):
        with pytest.raises(ValidationError):
            _load("demo-smollm2.toml", f"--demo.real.{setting}", value)
