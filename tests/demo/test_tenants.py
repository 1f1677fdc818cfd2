import argparse
from pathlib import Path

import pytest

from demo.cli import default_config_file, tenant_count
from demo.config import DemoLiverlConfig
from demo.tenants import OWN, SHARED, configure_tenants
from liverl.config import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def tenants_config(count: int = 3, file: str = "demo-tenants.toml"):
    config = load_config(CONFIGS / file, environ={}, schema=DemoLiverlConfig)
    config.demo.tenants.count = count
    return config


def test_each_tenant_gets_an_own_and_a_control_arm_with_its_own_token_and_key():
    config = tenants_config()
    arms = configure_tenants(config)
    assert [(a.tenant_id, a.arm) for a in arms] == [
        ("brisk", OWN), ("brisk-shared", SHARED), ("careful", OWN), ("careful-shared", SHARED),
        ("frugal", OWN), ("frugal-shared", SHARED)]
    assert sum(a.share for a in arms if a.tenant == "brisk") == pytest.approx(1.0)
    assert config.trainer.tenants.adapters == config.serving.tenants.watch == ["brisk", "careful", "frugal"]
    for arm in arms:  # capture and serving record each arm as its tenant id
        assert config.ingest.tenant_tokens[arm.tenant_id] == arm.capture_token
        assert config.serving.api_keys[arm.api_key].tenant == arm.tenant_id
    assert len({a.api_key for a in arms}) == len({a.capture_token for a in arms}) == len(arms)


def test_a_config_that_cannot_run_tenants_is_refused_with_what_to_set():
    with pytest.raises(ValueError) as error:
        configure_tenants(tenants_config(2, "demo.toml"))
    for needed in ['demo.toy_arch must be "llama"', "trainer.lora.enabled must be true",
                   "serving.lora.enabled must be true", "online_eval_command must be empty", "configs/demo-tenants.toml"]:
        assert needed in str(error.value)


@pytest.mark.parametrize("text, message", [("4", "choose 1 to 3, got 4"), ("0", "choose 1 to 3, got 0"),
                                           ("two", "whole number of tenants")])
def test_the_tenants_flag_is_refused_outside_the_defined_tenants(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        tenant_count(text)


def test_the_tenants_flag_reads_the_tenants_config_unless_a_file_is_named():
    assert tenant_count("3") == 3
    assert default_config_file(argparse.Namespace(tenants=3)) == CONFIGS / "demo-tenants.toml"
    assert default_config_file(argparse.Namespace(tenants=None)) == CONFIGS / "demo.toml"  # the demo's own pace


def test_liverl_demo_tenants_reads_the_tenants_config_and_a_named_file_wins(monkeypatch):
    import demo.run
    from liverl.cli import main

    seen = []

    def stop_before_starting(config, say):
        seen.append(config)
        raise RuntimeError("stopped by the test")

    monkeypatch.setattr(demo.run, "run_demo", stop_before_starting)
    assert main(["demo", "--tenants", "3"]) == 1
    assert seen[-1].demo.tenants.count == 3 and seen[-1].demo.toy_arch == "llama"
    assert main(["demo", "--tenants", "2", "@", str(CONFIGS / "demo.toml")]) == 1
    assert seen[-1].demo.tenants.count == 2 and seen[-1].demo.toy_arch == "gpt2"  # refused by run_demo, not here


def test_search_is_rewarded_by_the_tenants_own_score_not_context1():
    """brisk's users score a one-chunk answer 1.0 and a two-chunk one 0.25 (demo/product/preferences.py); Context-1,
    recall first, ranks them the other way. The tenants' adapters must learn what their users score."""
    from liverl.rewards.mixing import mix

    rewards = tenants_config().rewards
    found = {"search.traj_recall": 1.0, "search.answer_found": 1.0}
    one_chunk = {"outcome": 1.0, "search.precision": 1.0, "search.recall": 0.5, **found}
    both_chunks = {"outcome": 0.25, "search.precision": 1.0, "search.recall": 1.0, **found}
    assert mix(one_chunk, "search", 0, rewards) == pytest.approx(1.0)
    assert mix(both_chunks, "search", 0, rewards) == pytest.approx(0.25)
    default = DemoLiverlConfig().rewards
    assert mix(both_chunks, "search", 0, default) > mix(one_chunk, "search", 0, default)
