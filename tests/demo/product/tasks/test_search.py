import random

from demo.product.grammar import parse_tool_call
from demo.product.tasks import SearchTask


def task(seed=0):
    return SearchTask(random.Random(seed), "t")


def run(t, *texts):
    return [t.step(parse_tool_call(text, t.tools)) for text in texts]


def test_focused_search_then_the_top_two_is_a_perfect_answer():
    t = task()
    assert t.token_budget == 500
    (found,) = run(t, f"search {t.topic}")
    assert found.chunk_ids[:2] == tuple(t.context[:2]) and set(found.chunk_ids[:2]) == set(t.gold)
    run(t, f"answer {' '.join(t.context[:2])}")
    report = t.outcome()
    assert report.success and report.score == 1.0
    assert set(report.gold_chunk_ids) == set(t.gold) and set(report.answer_chunk_ids) < set(t.gold)
    assert set(t.answer) == set(t.gold)


def test_broad_search_overflows_the_budget_and_only_prune_is_allowed():
    t = task(1)
    run(t, "search all")
    assert t.over_budget and t.prompt().endswith("over :")
    (refused,) = run(t, f"answer {t.context[0]}")
    assert refused.is_error and "budget" in refused.output
    keep = list(t.gold)
    run(t, "prune_chunks " + " ".join(c for c in t.context if c not in keep))
    assert not t.over_budget
    run(t, "answer " + " ".join(keep))
    report = t.outcome()
    assert report.success and report.score == 1.0 - 0.1 * 2 and report.metrics["prunes"] == 1


def test_stopping_without_an_answer_scores_zero_and_answering_everything_is_partial():
    t = task(2)
    run(t, "search all", "done")
    assert t.is_done and t.outcome().score == 0.0
    t = task(3)
    run(t, f"search {t.topic}")
    run(t, "answer " + " ".join(t.context))
    assert round(t.outcome().score, 3) == round(2 * 2 / 6, 3)


def test_pruning_a_chunk_not_in_context_is_an_error():
    t = task(4)
    run(t, f"search {t.topic}")
    absent = next(c for c in ("c_0", "c_1", "c_2", "c_3", "c_4", "c_5", "c_6") if c not in t.context)
    (result,) = run(t, f"prune_chunks {absent}")
    assert result.is_error and t.broken_calls == 1
