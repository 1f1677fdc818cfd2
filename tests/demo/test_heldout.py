"""demo/heldout.py: the real-model demo's closing summary lines and verdict (pure logic, no engine)."""

from __future__ import annotations

import pytest

from demo.heldout import HeldoutComparison, _version_folder


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
