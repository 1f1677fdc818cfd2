"""The held-out evaluator's figures without an engine: out-of-template and in-template apart, several sampling
seeds paired on the same tasks, a fresh recorded seed every run, and the dev/final split on the command line."""

from __future__ import annotations

import json

import pytest

from demo.evaluate import heldout_success
from demo.evaluate.heldout_success import group_figures, paired_figures, run_tasks, sampling_seeds
from demo.product.policy import ROLE_SUBAGENT
from demo.product.tasks.chat.generate import heldout_tasks
from demo.product.tasks.chat.search import ChatSearchTask


def _answers(good: set[str]):
    """A fake engine: right answers to the search tasks whose key is in `good` (and to coding tasks with one
    fixed reply), wrong otherwise; helpers answer nothing."""
    def generate(requests, seeds):
        texts = []
        for request in requests:
            text = request.messages[-1]["content"]
            if request.role == ROLE_SUBAGENT:
                texts.append("")
                continue
            hit = [key for key in good if key.split("/")[1] in text]
            texts.append("" if not hit else f"{ChatSearchTask('x', hit[0]).gold.answer} [{hit[0].split('/')[1]}]")
        return texts
    return generate


def _play(good: set[str], seeds: list[int], n: int = 12):
    plays = []
    for seed in seeds:
        tasks = heldout_tasks(n)
        run_tasks(tasks, _answers(good), _answers(set()), seed)
        plays.append(tasks)
    return plays


def test_figures_give_out_of_template_and_in_template_apart_per_family_and_overall():
    tasks = heldout_tasks(12)
    search = [t for t in tasks if t.family == "search"]
    good = {t.key for t in search if t.part == "out-of-template"}
    figures = group_figures(_play(good, [5, 6, 7]))
    assert list(figures["parts"]) == ["out-of-template", "in-template"]
    out, within = figures["parts"]["out-of-template"], figures["parts"]["in-template"]
    assert out["search"]["rate"] == 1.0 and within["search"]["rate"] == 0.0
    assert out["search"]["n"] == 2 and out["search"]["plays"] == 6 and out["search"]["per_seed"] == [1.0] * 3
    assert out["all"]["n"] == 6 and out["all"]["successes"] == 6 and figures["all"]["plays"] == 36
    assert 0 < out["all"]["wilson95"][0] < out["all"]["rate"] <= out["all"]["wilson95"][1]


def test_paired_figures_pair_each_task_over_the_same_seeds():
    tasks = heldout_tasks(12)
    good = {t.key for t in tasks if t.family == "search"}
    before, after = _play(set(), [1, 2, 3]), _play(good, [1, 2, 3])
    paired = paired_figures(before, after)
    assert paired["parts"]["out-of-template"]["search"]["difference"] == 1.0
    assert paired["parts"]["out-of-template"]["search"]["seeds"] == 3
    assert paired["all"]["n"] == 12 and paired["all"]["gained"] == 4 and paired["all"]["lost"] == 0
    assert paired["families"]["coding"]["difference"] == 0.0


def test_the_sampling_seed_is_fresh_every_run_recorded_and_reproducible(monkeypatch, tmp_path, capsys):
    seen = []

    def fake_evaluate(folder, frozen, n_tasks, seed, engine, dtype, log, adapter, seeds, split):
        seen.append((seed, seeds, split))
        return {"seed": seed, "sampling_seeds": sampling_seeds(seed, seeds), "split": split, "families": {}}, []

    monkeypatch.setattr(heldout_success, "evaluate", fake_evaluate)
    (tmp_path / "config.json").write_text("{}")
    for _ in range(2):
        assert heldout_success.main(["--folder", str(tmp_path), "--tasks", "6"]) == 0
    assert seen[0][0] != seen[1][0] and seen[0][1:] == (3, "final")  # fresh, three seeds, the final split
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [p["seed"] for p in printed] == [seen[0][0], seen[1][0]]
    assert printed[0]["sampling_seeds"] == [seen[0][0], seen[0][0] + 1, seen[0][0] + 2]
    assert heldout_success.main(["--folder", str(tmp_path), "--seed", "41", "--seeds", "4", "--split", "dev"]) == 0
    assert seen[-1] == (41, 4, "dev")


def test_the_same_seed_samples_the_same_requests_and_another_seed_others():
    asked = {}

    def recording(label):
        def generate(requests, seeds):
            asked.setdefault(label, []).extend(seeds)
            return [""] * len(requests)
        return generate

    for label, seed in (("a", 9), ("b", 9), ("c", 10)):
        run_tasks(heldout_tasks(6), recording(label), recording(label), seed)
    assert asked["a"] == asked["b"] and not set(asked["a"]) & set(asked["c"])


def test_an_unknown_split_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        heldout_success.main(["--folder", str(tmp_path), "--split", "training"])


def _text_figures(folder, adapter=None) -> dict:
    return {"general": {"nll": 3.0, "tokens": 300},
            "forgetting": {"domains": ["prose"] * 4, "chunk_nll": [300.0 + i for i in range(4)],
                           "by_domain": {"prose": 3.0}, "tokens": 512, "nll": 3.0}}


def test_a_line_of_adapters_pairs_each_with_the_one_before_it(monkeypatch, tmp_path):
    search = sorted(t.key for t in heldout_tasks(12) if t.family == "search")
    knows = {"": set(), "a1": set(search[:2]), "a2": set(search[:1]), "a3": set(search)}
    closed = []

    class Engine:
        def __init__(self, adapter):
            self.name = adapter.name if adapter else ""
            self.generate = _answers(knows[self.name])

        def __call__(self, requests, seeds):
            return self.generate(requests, seeds)

        def close(self):
            closed.append(self.name)

    monkeypatch.setattr(heldout_success, "make_generate", lambda engine, folder, dtype, adapter=None: Engine(adapter))
    monkeypatch.setattr(heldout_success, "text_figures", _text_figures)
    line = [tmp_path / name for name in ("a1", "a2", "a3")]
    result, _ = heldout_success.evaluate(tmp_path, None, 12, 5, "hf", adapters=line, seeds=2)
    steps = [step["paired_with_previous"]["families"]["search"] for step in result["chain"]]
    assert [(s["gained"], s["lost"]) for s in steps] == [(2, 0), (0, 1), (3, 0)]  # a2 lost what a1 had gained
    assert [step["adapter_folder"] for step in result["chain"]] == [str(p) for p in line]
    assert result["paired"]["families"]["search"]["gained"] == 4  # the last against the base, as with one adapter
    assert result["adapter_folder"] == str(line[-1]) and result["adapter"]["families"]["search"]["rate"] == 1.0
    assert closed == ["a1", "a2", "a3"]  # each version's engine stopped before the next starts
    one, _ = heldout_success.evaluate(tmp_path, None, 12, 5, "hf", adapters=line[:1], seeds=2)
    assert "chain" not in one and one["paired"]["families"]["search"]["gained"] == 2


def test_an_adapter_that_is_not_a_peft_folder_is_refused_before_any_engine_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(heldout_success, "evaluate", lambda *a: pytest.fail("no engine for a bad --adapter"))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "adapter_config.json").write_text("{}")
    with pytest.raises(SystemExit):
        heldout_success.main(["--folder", str(tmp_path), "--adapter", str(tmp_path / "good"),
                              "--adapter", str(tmp_path / "missing")])


def test_a_group_asked_more_tasks_than_its_split_holds_is_named():
    """The final split holds 28 in-template search keys: 210 tasks (35 a family and part) play 7 of them twice,
    which the evaluator says; the out-of-template groups, and the demo's 70 tasks, repeat none."""
    from demo.evaluate.heldout_success import repeated_keys
    from demo.product.tasks.chat.generate import heldout_tasks

    assert repeated_keys(heldout_tasks(210)) == {"in-template search": (35, 28)}
    assert repeated_keys(heldout_tasks(70)) == {}
