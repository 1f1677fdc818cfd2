"""The held-out plan's power: the paired difference's variance split into tasks' and seeds' shares, and what
another plan of tasks x seeds would give (demo/evaluate/power.py)."""

import json
import random
import statistics

import pytest

from demo.evaluate.power import main, parse_plan, shares_of_result, variance_shares


def _plays(rng, tasks, seeds, gains):
    """Base and adapter outcomes of `tasks` tasks under `seeds` paired seeds; task i's adapter succeeds more often
    by gains(i)."""
    before, after = [], []
    for task in range(tasks):
        chance = rng.uniform(0.1, 0.5)
        draws = [rng.random() for _ in range(seeds)]
        before.append([u < chance for u in draws])
        after.append([u < chance + gains(task) for u in draws])
    return before, after


def test_tasks_that_all_gained_alike_leave_only_the_seeds_share():
    before, after = _plays(random.Random(1), 400, 4, lambda task: 0.2)
    shares = variance_shares(before, after)
    assert shares.difference == pytest.approx(0.2, abs=0.03)
    assert shares.between < 0.1 * shares.within
    # more seeds then narrow the interval as much as more tasks do
    assert shares.standard_error(100, 4) == pytest.approx(shares.standard_error(400, 1), rel=0.1)


def test_tasks_that_gained_apart_give_a_between_share_that_seeds_cannot_remove():
    before, after = _plays(random.Random(2), 400, 4, lambda task: 0.4 if task % 2 else 0.0)
    shares = variance_shares(before, after)
    assert shares.between == pytest.approx(0.04, abs=0.015)  # the gains' own variance: 0.2 squared
    assert shares.standard_error(100, 4) > 1.3 * shares.standard_error(400, 1)


def test_the_predicted_standard_error_is_the_one_the_plan_gives():
    """The shares of one result predict the spread of the difference over fresh results of another plan."""
    rng, which = random.Random(3), random.Random(5)
    gains = lambda task: 0.3 if which.random() < 1 / 3 else 0.05  # noqa: E731  (each result draws its tasks anew)
    shares = variance_shares(*_plays(rng, 300, 3, gains))
    differences = [statistics.fmean(statistics.fmean(int(a) - int(b) for b, a in zip(bs, as_))
                                    for bs, as_ in zip(*_plays(rng, 60, 2, gains))) for _ in range(400)]
    assert statistics.stdev(differences) == pytest.approx(shares.standard_error(60, 2), rel=0.15)


@pytest.mark.parametrize(("before", "after"), [([[True, False]], [[True, True]]),  # one task
                                               ([[True], [False]], [[True], [True]]),  # one seed
                                               ([[True, False], [True]], [[True, True], [True]])])  # ragged
def test_what_cannot_be_split_is_refused(before, after):
    with pytest.raises(ValueError):
        variance_shares(before, after)


def _result(before, after, parts):
    outcomes = lambda rows: [{"key": f"k{i}", "family": "coding", "part": parts[i], "success": row}  # noqa: E731
                             for i, row in enumerate(rows)]
    return {"base": {"outcomes": outcomes(before)}, "adapter": {"outcomes": outcomes(after)}}


def test_the_command_reads_one_part_of_a_paired_result(tmp_path, capsys):
    before, after = _plays(random.Random(4), 40, 3, lambda task: 0.2)
    parts = ["out-of-template" if i % 2 else "in-template" for i in range(40)]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_result(before, after, parts)))
    assert shares_of_result(json.loads(path.read_text()), "out-of-template").tasks == 20
    assert main([str(path), "--plan", "36x3", "--plan", "108x3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("out-of-template: 20 tasks x 3 seeds")
    assert [line.split()[0] for line in lines[1:]] == ["36", "108"]


def test_the_command_refuses_an_unpaired_result_and_a_bad_plan(tmp_path, capsys):
    path = tmp_path / "unpaired.json"
    path.write_text(json.dumps({"outcomes": []}))
    with pytest.raises(SystemExit):
        main([str(path)])
    assert "not a paired result" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(path), "--plan", "1x3"])
    mismatched = _result([[True, False]] * 2, [[True, True]] * 2, ["out-of-template"] * 2)
    mismatched["adapter"]["outcomes"][0]["key"] = "another task"
    path.write_text(json.dumps(mismatched))
    with pytest.raises(SystemExit):
        main([str(path)])
    assert "not of the same tasks" in capsys.readouterr().err
    for text in ("", "36", "36x0", "x3"):
        with pytest.raises(Exception):
            parse_plan(text)
