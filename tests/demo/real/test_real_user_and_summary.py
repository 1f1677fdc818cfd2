"""The real product's simulated users and the held-out summary lines (pure logic, no engine)."""

from __future__ import annotations

import random

import pytest

from demo.heldout import HeldoutComparison, _version_folder
from demo.product.real.user import UNSOLVED_FOLLOW_UP, react
from demo.product.tasks.base import OutcomeReport

PASSED = OutcomeReport(success=True, score=1.0, detail="unit tests: passed")
FAILED = OutcomeReport(success=False, score=0.0, detail="unit tests: AssertionError")


def _kinds(family: str, report: OutcomeReport, n: int = 400) -> list[str]:
    rng = random.Random(0)
    return [item.kind for _ in range(n) for item in react(family, report, "call-1", rng).feedback]


def test_coding_users_keep_passing_functions_and_revert_failing_ones():
    kept_when_passed = _kinds("coding", PASSED).count("EDIT_KEPT") / 400
    kept_when_failed = _kinds("coding", FAILED).count("EDIT_KEPT") / 400
    assert kept_when_passed > 0.8 and kept_when_failed < 0.25
    reaction = next(r for r in (react("coding", FAILED, "call-1", random.Random(s)) for s in range(50)) if r.follow_up)
    assert reaction.follow_up == UNSOLVED_FOLLOW_UP
    assert all(item.target_call_id == "call-1" for item in reaction.feedback)
    assert not any(react("coding", PASSED, "c", random.Random(s)).follow_up for s in range(200))


@pytest.mark.parametrize("family", ["search", "orchestrator"])
def test_rating_users_thumb_up_by_outcome(family):
    up_good = _kinds(family, PASSED).count("THUMBS_UP")
    down_good = _kinds(family, PASSED).count("THUMBS_DOWN")
    up_bad = _kinds(family, FAILED).count("THUMBS_UP")
    assert down_good == 0 and up_bad == 0 and 120 < up_good < 280  # about half the users rate at all


def _result(successes: int, nll: float) -> dict:
    return {"families": {"coding": {"n": 20, "successes": successes, "rate": successes / 20, "wilson95": [0.1, 0.5]}},
            "general": {"nll": nll}}


def test_heldout_lines_show_both_policies_with_intervals_and_nll():
    lines = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7").lines()
    assert lines[0].split() == ["held-out", "coding", "base", "4/", "20", "=", "0.200", "[0.100,", "0.500]", "|",
                                "v7", "6/", "20", "=", "0.300", "[0.100,", "0.500]"]
    assert lines[1] == "general-text NLL (nats/token) base 2.5000  |  v7 2.6000"


def _paired(low: float, high: float) -> dict:
    return {"all": {"difference": (low + high) / 2, "ci95": [low, high], "gained": 9, "lost": 3}}


def test_heldout_verdict_says_better_only_when_the_interval_is_above_zero():
    shown = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7", _paired(0.02, 0.18))
    assert shown.verdict() == "held-out success v7 - base +0.100, 95 % [+0.020, +0.180]: better than the base"
    unshown = HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7", _paired(-0.02, 0.18))
    assert unshown.verdict().endswith("[-0.020, +0.180]: not shown better than the base")
    assert HeldoutComparison(_result(4, 2.5), _result(6, 2.6), "7").verdict() is None


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
