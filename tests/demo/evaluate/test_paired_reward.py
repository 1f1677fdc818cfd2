"""The held-out evaluator: a policy against itself differs by exactly nothing; a copy degraded by weight noise is
significantly worse and refused by the gate's online judgement, through the command configs/demo.toml ships."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from demo.config import DemoLiverlConfig
from demo.evaluate.paired_reward import evaluate, heldout_rng, parse_args
from liverl.config import load_config
from liverl.config.trainer import GateConfig
from trainer.gate.online_eval import evaluate_online, judge_online, parse_evaluation
from trainer.gate.online_eval_process import online_evaluator

DEMO_TOML = Path(__file__).resolve().parents[3] / "configs" / "demo.toml"
TASKS = 24  # 8 per family: a few seconds per policy with the tiny model


def _config():
    return load_config(DEMO_TOML, environ={}, schema=DemoLiverlConfig)


def _degraded_copy(base: Path, out: Path, std: float = 0.05) -> Path:
    """The base policy with Gaussian noise of `std` added to every weight (seeded)."""
    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(base, out)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * std)
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_a_policy_against_itself_differs_by_exactly_nothing(demo_base_policy, tmp_path):
    config = _config()
    copy = shutil.copytree(demo_base_policy, tmp_path / "copy")
    result = evaluate(copy, demo_base_policy, TASKS, seed=0, config=config)
    candidate, champion, paired = result["candidate"], result["champion"], result["paired"]
    assert candidate == champion  # same tasks, same random numbers at every call: the same sessions
    assert candidate["n"] == TASKS and set(candidate["reward_by_family"]) == {"coding", "search", "orchestrator"}
    assert 0.0 <= candidate["reward_mean"] <= 1.0 and candidate["reward_se"] > 0
    assert {"rate.broken_tool_calls", "rate.clarifying", "rate.give_up"} <= set(candidate["monitors"])
    assert all(0.0 <= rate <= 1.0 for rate in candidate["monitors"].values())
    assert paired["reward_change"] == paired["reward_change_se"] == 0.0
    assert set(paired["monitors_change"].values()) == set(paired["monitors_change_se"].values()) == {0.0}
    assert judge_online(parse_evaluation(json.dumps(result)), config.trainer.gate) == []


def test_a_noise_degraded_copy_is_worse_and_refused_through_the_shipped_command(demo_base_policy, tmp_path):
    config = _config()
    gate = config.trainer.gate
    assert gate.online_eval_mode == "persistent"
    command = gate.online_eval_command
    command[command.index("--tasks") + 1] = str(TASKS)  # the shipped command, on fewer tasks
    degraded = _degraded_copy(demo_base_policy, tmp_path / "degraded")
    evaluator = online_evaluator(gate)
    try:
        evaluation = evaluator.evaluate(degraded, demo_base_policy)
        # The same process judges the next candidate; the champion's sessions are kept, so it is not run again.
        again = evaluator.evaluate(shutil.copytree(demo_base_policy, tmp_path / "copy"), demo_base_policy)
    finally:
        evaluator.close()
    assert evaluator.started == 1
    assert again.reward_change() == (0.0, 0.0)  # the copy's weights are the champion's: the same sessions
    assert evaluation.champion == again.champion
    change, se = evaluation.reward_change()
    broken, broken_se = evaluation.monitor_changes()["rate.broken_tool_calls"]
    # Shown worse, not merely not shown better: the reward's upper bound is below 0 or broken calls' lower above 0.
    assert change < 0 and broken > 0
    assert change + 2 * se < 0 or broken - 2 * broken_se > 0
    reasons = judge_online(evaluation, config.trainer.gate)
    assert any("online reward" in r or "rate.broken_tool_calls" in r for r in reasons)


def test_the_per_candidate_command_gives_the_same_figures_as_the_persistent_one(demo_base_policy, tmp_path):
    degraded = _degraded_copy(demo_base_policy, tmp_path / "degraded", std=0.02)
    command = ["python", "-m", "demo.evaluate", "gate", "--candidate", "{candidate}", "--champion", "{champion}",
               "--tasks", "6", "--seed", "3"]
    once = evaluate_online(command, degraded, demo_base_policy, 120.0)
    persistent = online_evaluator(GateConfig(online_eval_command=["python", "-m", "demo.evaluate", "gate", "--serve",
                                                                  "--tasks", "6", "--seed", "3"],
                                             online_eval_mode="persistent", online_eval_timeout_s=120.0))
    try:
        assert persistent.evaluate(degraded, demo_base_policy) == once
    finally:
        persistent.close()


def test_a_bad_request_is_answered_with_an_error_and_the_evaluator_goes_on(demo_base_policy, tmp_path):
    process = subprocess.run(
        [sys.executable, "-m", "demo.evaluate", "gate", "--serve", "--tasks", "2"], capture_output=True, text=True,
        timeout=120, input="not json\n" + json.dumps({"id": "r-1", "candidate": str(tmp_path),
                                                      "champion": str(demo_base_policy)})
        + "\n" + json.dumps({"id": "r-2", "candidate": str(demo_base_policy), "champion": str(demo_base_policy)})
        + "\n")
    answers = [json.loads(line) for line in process.stdout.splitlines()]
    assert process.returncode == 0 and len(answers) == 3
    assert [answer["id"] for answer in answers] == [None, "r-1", "r-2"]  # each answer names its request
    assert "JSONDecodeError" in answers[0]["error"]
    assert "not a HF policy folder" in answers[1]["error"] and str(tmp_path) in answers[1]["error"]
    assert answers[2]["paired"]["reward_change"] == 0.0


def test_heldout_sessions_share_no_random_stream_with_traffic():
    # traffic.py seeds session i of seed s with random.Random(s * 1_000_003 + i)
    traffic = {random.Random(seed * 1_000_003 + index).getrandbits(64) for seed in range(4) for index in range(2000)}
    heldout = {heldout_rng(seed, index).getrandbits(64) for seed in range(4) for index in range(2000)}
    assert len(heldout) == 8000 and not traffic & heldout
    assert heldout_rng(0, 5).random() == heldout_rng(0, 5).random()  # and it is reproducible


def test_bad_arguments_say_what_to_do(demo_base_policy, tmp_path):
    with pytest.raises(SystemExit):
        parse_args(["--candidate", str(demo_base_policy), "--champion", str(demo_base_policy), "--tasks", "1"])
    with pytest.raises(SystemExit):
        parse_args(["--candidate", str(tmp_path), "--champion", str(demo_base_policy)])
    with pytest.raises(SystemExit):
        parse_args(["--candidate", str(demo_base_policy)])  # no champion, no --serve
    with pytest.raises(SystemExit):
        parse_args(["--serve", "--candidate", str(demo_base_policy)])  # --serve reads the folders from stdin
    assert parse_args(["--serve", "--tasks", "4"]).serve
