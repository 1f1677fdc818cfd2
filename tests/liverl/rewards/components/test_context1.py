"""Context-1 search components against hand-computed cases."""

from __future__ import annotations

import pytest

from liverl.rewards import label
from tests.liverl.rewards.session_builder import SessionBuilder

GOLD = ["g1", "g2", "g3", "g4"]


def test_retrieval_with_pruning(config):
    s = SessionBuilder("search")
    s.act("search", {"q": "a"}, chunk_ids=["g1", "x1", "x2"])
    s.act("search", {"q": "b"}, chunk_ids=["g2", "g3", "x3"])
    s.act("prune_chunks", {"chunk_ids": ["x1", "x2", "x3"]})
    s.outcome(success=True, gold_chunk_ids=GOLD, answer_chunk_ids=["g2"])
    got = label(s.build(), "main", config)
    assert got.components["search.precision"] == 1.0  # final {g1, g2, g3}
    assert got.components["search.recall"] == pytest.approx(0.75)
    assert got.components["search.traj_recall"] == pytest.approx(0.75)
    assert got.components["search.answer_found"] == 1.0
    assert got.signals["retrieved_chunks"] == 6 and got.signals["final_chunks"] == 3


def test_pruning_gold_lowers_recall_but_not_trajectory_recall(config):
    s = SessionBuilder("search")
    s.act("search", {"q": "a"}, chunk_ids=["g1", "g2"])
    s.act("prune_chunks", {"chunk_ids": ["g2"]})
    s.outcome(success=True, gold_chunk_ids=GOLD, answer_chunk_ids=["g2"])
    got = label(s.build(), "main", config).components
    assert got["search.recall"] == pytest.approx(0.25)
    assert got["search.traj_recall"] == pytest.approx(0.5)
    assert got["search.answer_found"] == 0.0


def test_empty_retrieval_scores_zero(config):
    s = SessionBuilder("search")
    s.act("search", {"q": "a"}, chunk_ids=[])
    s.outcome(success=False, gold_chunk_ids=GOLD, answer_chunk_ids=["g1"])
    got = label(s.build(), "main", config).components
    assert got["search.precision"] == got["search.recall"] == got["search.traj_recall"] == 0.0
    assert got["search.answer_found"] == 0.0


def test_no_gold_leaves_retrieval_unscored(config):
    s = SessionBuilder("search")
    s.act("search", {"q": "a"}, chunk_ids=["c1"])
    got = label(s.build(), "main", config)
    assert "search.precision" not in got.components
    assert got.signals["search.no_gold"] == 1.0


def test_past_the_hard_cutoff_only_prune_is_allowed(config):
    s = SessionBuilder("search", token_budget=100)
    s.act("search", {"q": "a"}, chunk_ids=["g1"], prompt_tokens=50)  # within budget
    s.act("search", {"q": "b"}, chunk_ids=["g2"], prompt_tokens=150)  # violation
    s.act("prune_chunks", {"chunk_ids": ["g2"]}, prompt_tokens=150)  # allowed
    s.outcome(success=True, gold_chunk_ids=GOLD)
    got = label(s.build(), "main", config)
    assert got.signals["budget_violations"] == 1
    assert got.components["search.budget_violation"] == pytest.approx(-0.25)
    config.context1.hard_cutoff_fraction = 0.4  # cutoff 40 tokens: the first search (55) is past it too
    assert label(s.build(), "main", config).components["search.budget_violation"] == pytest.approx(-0.5)


def test_broken_search_calls_retrieve_nothing(config):
    s = SessionBuilder("search")
    s.act("search", {"q": "a"}, chunk_ids=["g1"], valid=False)
    s.outcome(success=False, gold_chunk_ids=GOLD)
    assert label(s.build(), "main", config).components["search.recall"] == 0.0
