"""demo/heldout.py: the real-model demo's closing summary lines and verdict (pure logic, no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.heldout import HeldoutComparison, Promotion, _version_folder, success_drop


def _figures(successes: int, n: int = 20) -> dict:
    return {"n": n, "plays": 3 * n, "successes": successes, "rate": successes / (3 * n), "wilson95": [0.1, 0.5],
            "per_seed": [0.2, 0.25, 0.3]}


def _forgetting(scale: float) -> dict:
    return {"domains": ["prose"] * 4 + ["code"] * 4, "chunk_nll": [scale * (300 + i) for i in range(8)],
            "by_domain": {"prose": 3.0 * scale, "code": 2.0 * scale}, "tokens": 1024}


def _result(successes: int, nll: float, scale: float = 1.0) -> dict:
    return {"split": "final", "tasks": 40, "seed": 1234, "sampling_seeds": [1234, 1235, 1236],
            "parts": {"out-of-template": {"coding": _figures(successes)},
                      "in-template": {"coding": _figures(successes + 5)}},
            "general": {"nll": nll}, "forgetting": _forgetting(scale)}


def test_heldout_lines_give_out_of_template_first_with_seeds_intervals_forgetting_and_nll():
    lines = HeldoutComparison(_result(4, 2.5), _result(6, 2.6, 1.01), "7").lines()
    assert lines[0] == "held-out final split: 40 tasks x 3 sampling seeds [1234, 1235, 1236] (reproduce: --seed 1234)"
    assert lines[1].split() == ["out-of-template", "coding", "base", "4/", "60", "=", "0.067", "[0.100,", "0.500]",
                                "seeds", "0.200-0.300", "|", "v7", "6/", "60", "=", "0.100", "[0.100,", "0.500]",
                                "seeds", "0.200-0.300"]
    assert lines[2].startswith("in-template     coding       base   9/ 60")
    assert lines[3].startswith("forgetting set NLL v7/base 1.0100, 95 % [1.0100, 1.0100] over 8 chunks")
    assert lines[3].endswith("(1024 tokens, 2 domains): worse than the base")
    assert lines[4] == "general-text NLL (nats/token, the gate's text) base 2.5000  |  v7 2.6000"
    assert not any("nothing compared" in line for line in lines)


def test_a_run_that_served_only_the_base_says_nothing_was_compared():
    lines = HeldoutComparison(_result(4, 2.5), _result(4, 2.5), "1").lines()
    assert lines[1] == "no trained version was served by the run's end: the base's own figures, nothing compared"
    assert HeldoutComparison(_result(4, 2.5), _result(4, 2.5), "1").verdict() is None


def _paired(out: tuple[float, float], within: tuple[float, float]) -> dict:
    def one(low, high):
        return {"n": 40, "seeds": 3, "difference": (low + high) / 2, "ci95": [low, high], "gained": 9, "lost": 3}
    return {"parts": {"out-of-template": {"all": one(*out)}, "in-template": {"all": one(*within)}}}


def test_heldout_verdict_leads_with_out_of_template_and_says_better_only_above_zero():
    shown = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7", _paired((-0.02, 0.18), (0.02, 0.18)))
    assert shown.verdict() == ("held-out success v7 - base, out-of-template +0.080, 95 % [-0.020, +0.180]: not shown "
                               "better than the base: too little evidence to tell it from no change (40 tasks x 3 "
                               "seeds); in-template +0.100, 95 % [+0.020, +0.180]: better than the base")
    assert shown.improved() is False  # in-template alone is not generalisation
    assert HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7", _paired((0.01, 0.2), (-0.1, 0.1))).improved()
    assert HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7").verdict() is None


def test_a_held_out_interval_below_zero_says_worse_not_too_little_evidence():
    worse = HeldoutComparison(_result(6, 2.5), _result(4, 2.6), "7", _paired((-0.2, -0.01), (-0.1, 0.1)))
    assert "out-of-template -0.105, 95 % [-0.200, -0.010]: worse than the base;" in worse.verdict()
    assert worse.verdict().endswith("too little evidence to tell it from no change (40 tasks x 3 seeds)")


def _step(difference: float, low: float, high: float) -> dict:
    return {"all": {"n": 70, "seeds": 3, "difference": difference, "ci95": [low, high], "gained": 5, "lost": 4}}


def test_every_promotion_is_judged_against_the_champion_it_replaced():
    promotions = (Promotion("3", "1", _step(0.05, -0.02, 0.12)), Promotion("7", "3", _step(-0.30, -0.41, -0.19)),
                  Promotion("9", "7", _step(-0.04, -0.09, 0.01)))
    compared = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "9", _paired((0.01, 0.2), (0.0, 0.1)),
                                 promotions, max_drop=0.25)
    lines = compared.lines()
    assert "promotion v7 - v3 (the champion it replaced), all tasks -0.300, 95 % [-0.410, -0.190] (paired over 70 " \
           "tasks: 5 gained, 4 lost)" in lines
    assert lines[-1] == compared.promotions_verdict() == (
        "1 of 3 promotions worse than the champion they replaced by more than 0.250 (v7); shown worse at 95 %: v7; "
        "the largest drop v7 - v3 -0.300, 95 % [-0.410, -0.190]")
    within = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "9", None, promotions[::2], max_drop=0.25)
    assert within.promotions_verdict() == (
        "0 of 2 promotions worse than the champion they replaced by more than 0.250 (none); shown worse at 95 %: "
        "none; the largest drop v9 - v7 -0.040, 95 % [-0.090, +0.010]")
    assert within.as_dict()["promotions"][1] == {"version": "9", "replaced": "7", "paired": _step(-0.04, -0.09, 0.01)}
    assert HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "9").promotions_verdict() is None  # not measured


def test_the_gates_drop_is_read_as_the_same_share_of_success():
    from demo.config import DemoLiverlConfig

    config = DemoLiverlConfig()
    config.trainer.gate.max_reward_drop = 0.5
    config.trainer.gate.reward_range = (-1.0, 1.0)
    assert success_drop(config) == 0.25
    config.trainer.gate.reward_range = (0.0, 1.0)
    assert success_drop(config) == 0.5


def test_the_demo_draws_a_fresh_seed_every_run_and_plays_the_final_split(monkeypatch, tmp_path):
    import demo.heldout as heldout
    from demo.config import DemoLiverlConfig

    config = DemoLiverlConfig()
    config.stack.data_dir = tmp_path
    config.demo.real.heldout_tasks = 210
    assert heldout.heldout_plan(config) == (70, 3)  # the same 210 plays a policy as before: 70 tasks x 3 seeds
    argvs = []

    def fake_start(name, argv, log, env):
        argvs.append(argv)
        out = argv[argv.index("--json") + 1]

        class Done:
            pid = 0

            def wait(self, timeout):
                Path(out).write_text(json.dumps(_result(4, 2.5)))
                return 0
        return Done()

    monkeypatch.setattr(heldout.processes, "start", fake_start)
    monkeypatch.setattr(heldout.processes, "stop", lambda pid: None)
    for _ in range(2):
        assert heldout.compare_heldout(config, tmp_path / "base", "1", lambda line: None) is not None
    seeds = [argv[argv.index("--seed") + 1] for argv in argvs]
    assert seeds[0] != seeds[1] and seeds[0] != str(config.demo.seed)
    assert all(argv[argv.index("--split") + 1] == "final" and argv[argv.index("--seeds") + 1] == "3"
               and argv[argv.index("--tasks") + 1] == "70" for argv in argvs)
    # An experiment plays the dev split, and its verdict says so: its figures never stand for the final claim.
    config.demo.real.heldout_split = "dev"
    said = []
    heldout.compare_heldout(config, tmp_path / "base", "1", said.append)
    assert argvs[-1][argvs[-1].index("--split") + 1] == "dev" and "held-out (dev split)" in said[0]
    dev = {**_result(4, 2.5), "split": "dev"}
    assert HeldoutComparison(dev, dev, "7", _paired((0.01, 0.2), (0.01, 0.2))).verdict().startswith(
        "held-out success v7 - base on the dev split (configs are tuned on it: not the final claim), ")


def test_the_evaluations_ceiling_grows_with_the_versions_and_the_plays():
    from demo.config import DemoLiverlConfig
    from demo.heldout import evaluation_timeout_s

    config = DemoLiverlConfig()
    config.demo.real.heldout_timeout_s = 900.0
    config.demo.real.heldout_tasks = 210
    assert evaluation_timeout_s(config, 0) == evaluation_timeout_s(config, 1) == 900.0
    assert evaluation_timeout_s(config, 4) == 2250.0  # base and four versions: five policies play
    config.demo.real.heldout_tasks = 630
    assert evaluation_timeout_s(config, 4) == 6750.0  # three times the plays each
    config.demo.real.heldout_tasks = 60
    assert evaluation_timeout_s(config, 1) == 900.0  # fewer plays keep the ceiling


def test_version_folder_is_found_below_a_download(tmp_path):
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text("{}")
    assert _version_folder(tmp_path) == tmp_path / "policy"
    with pytest.raises(FileNotFoundError, match="no HF policy or adapter folder"):
        _version_folder(tmp_path / "policy" / "empty") if (tmp_path / "policy" / "empty").mkdir() is None else None


def test_heldout_off_says_so_and_plays_nothing(tmp_path):
    from demo.config import DemoLiverlConfig
    from demo.heldout import compare_heldout

    config = DemoLiverlConfig()
    config.stack.data_dir = tmp_path
    config.demo.real.heldout_tasks = 0
    lines: list[str] = []
    assert compare_heldout(config, tmp_path / "no-base", "3", lines.append) is None
    assert lines == ["      held-out evaluation off (demo.real.heldout_tasks = 0)"] and not (tmp_path / "heldout").exists()
