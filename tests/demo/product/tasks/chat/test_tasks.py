"""The real-model tasks judged on scripted replies: what passes, what fails, and how a run batches them."""

from __future__ import annotations

from demo.evaluate.heldout_success import group_figures, run_tasks
from demo.product.policy import ROLE_ORCHESTRATOR, ROLE_SUBAGENT
from demo.product.tasks.chat.coding import ChatCodingTask, extract_code
from demo.product.tasks.chat.corpus import documents_by_id, load_corpus, mentions, search
from demo.product.tasks.chat.orchestrator import ChatOrchestratorTask, orchestrator_key, sub_questions
from demo.product.tasks.chat.search import DOCS_SHOWN, ChatSearchTask


def test_coding_task_runs_its_unit_tests_on_the_fenced_code():
    task = ChatCodingTask("t", "coding/add/plus/7")
    assert "`plus(x)` that returns x plus 7" in task.requests()[0].messages[-1]["content"]
    task.respond(["Here you go:\n```python\ndef plus(x):\n    return x + 7\n```\nThis adds seven."])
    assert task.done and task.outcome().success and task.outcome().score == 1.0
    wrong = ChatCodingTask("t", "coding/add/plus/7")
    wrong.respond(["def plus(x):\n    return x + 6"])
    assert not wrong.outcome().success and "AssertionError" in wrong.outcome().detail


def test_code_extraction_takes_the_first_block_or_the_first_def():
    assert extract_code("```py\na = 1\n```\n```python\nb = 2\n```") == "a = 1\n"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off at max tokens
    assert extract_code("Sure! def f(): return 1") == "def f(): return 1"


def test_search_task_wants_the_answer_and_only_the_right_citation():
    doc = load_corpus()[0]
    task = ChatSearchTask("t", f"search/{doc.id}")
    prompt = task.requests()[0].messages[-1]["content"]
    assert f"[{doc.id}] {doc.text}" in prompt and doc.question in prompt
    assert len(task.shown) == DOCS_SHOWN and doc in task.shown
    replies = {f"{doc.answer} [{doc.id}]": (True, 1.0), f"{doc.answer}": (False, 0.5),
               f"[{doc.id}]": (False, 0.5), f"{doc.answer} [{doc.id}] [D999]": (False, 0.5)}
    for reply, (success, score) in replies.items():
        task = ChatSearchTask("t", f"search/{doc.id}")
        task.respond([reply])
        assert (task.outcome().success, task.outcome().score) == (success, score), reply


def test_the_retriever_ranks_the_document_a_question_is_about_first():
    hits = sum(search(doc.question, 1)[0].id == doc.id for doc in load_corpus())
    assert hits / len(load_corpus()) > 0.95
    assert mentions("It was Ada   Ememtor, I think.", "Ada Ememtor") and not mentions("Ada", "Ada Ememtor")


def test_orchestrator_sends_each_sub_question_to_a_frozen_helper_and_checks_every_fact():
    first, second = load_corpus()[:2]
    key = orchestrator_key([first.id, second.id])
    task = ChatOrchestratorTask("t", key)
    (plan,) = task.requests()
    assert plan.role == ROLE_ORCHESTRATOR and "Split this request into 2 separate questions" in plan.messages[-1]["content"]
    task.respond([f"1. {first.question}\n2. {second.question}"])
    helpers = task.requests()
    assert [r.role for r in helpers] == [ROLE_SUBAGENT, ROLE_SUBAGENT]
    assert f"[{first.id}]" in helpers[0].messages[-1]["content"]  # the helper sees its sub-question's documents
    task.respond([f"It is {first.answer}.", "I do not know."])
    outcome = task.outcome()
    assert task.done and not outcome.success and outcome.score == 0.5


def test_orchestrator_that_does_not_split_gets_nothing_and_no_helper_runs():
    first, second = load_corpus()[:2]
    task = ChatOrchestratorTask("t", orchestrator_key([first.id, second.id]))
    task.respond([f"{first.question} and {second.question}"])
    assert task.done and task.requests() == []
    assert task.outcome().score == 0.0 and "1 sub-questions" in task.outcome().detail
    assert sub_questions("- a question?\n\n2) another one?\nQuestion 3: third?") == ["a question?", "another one?",
                                                                                        "third?"]


def test_run_tasks_batches_the_policy_and_the_frozen_helpers_apart():
    docs = documents_by_id()
    ids = sorted(docs)[:3]
    tasks = [ChatSearchTask("s", f"search/{ids[0]}"), ChatOrchestratorTask("o", orchestrator_key(ids[1:3]))]
    calls: list[tuple[str, int]] = []

    def policy(requests, seeds):
        calls.append(("policy", len(requests)))
        return [f"{docs[ids[0]].answer} [{ids[0]}]" if r.role != ROLE_ORCHESTRATOR
                else f"{docs[ids[1]].question}\n{docs[ids[2]].question}" for r in requests]

    def frozen(requests, seeds):
        calls.append(("frozen", len(requests)))
        return [f"{docs[ids[1]].answer}", f"{docs[ids[2]].answer}"]

    assert run_tasks(tasks, policy, frozen, seed=0) == 2
    assert calls == [("policy", 2), ("frozen", 2)]
    figures = group_figures([tasks])["families"]
    assert figures["search"]["successes"] == figures["orchestrator"]["successes"] == 1
    assert figures["search"]["wilson95"] == [0.2065, 1.0]
