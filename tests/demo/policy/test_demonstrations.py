import random
from collections import Counter

from demo.policy.demonstrations import _play, make_demonstrations
from demo.policy.vocabulary import VOCABULARY
from demo.product.grammar import BUGS, FIXES, parse_tool_call
from demo.product.tasks import make_task


def test_every_word_is_in_the_vocabulary():
    words = {w for d in make_demonstrations(60, seed=0) for w in f"{d.prompt} {d.completion}".split()}
    from demo.policy.tiny_policy import BASE_SYMBOLS

    assert words <= set(VOCABULARY) | set(BASE_SYMBOLS)


def test_demonstrations_mix_good_calls_with_the_known_hacks():
    demos = make_demonstrations(200, seed=1)
    calls = [parse_tool_call(d.completion) for d in demos]
    names = Counter(call.name if call.valid else "BROKEN" for call in calls)
    for name in ("edit", "ask_user", "search", "prune_chunks", "answer", "create_subagent", "assign_task", "done"):
        assert names[name] > 0, name
    assert names["BROKEN"] > 0
    assert all(len(d.completion.split()) + 1 <= 8 for d in demos)


def test_the_demonstrated_behaviour_is_mediocre():
    rng = random.Random(0)
    for family in ("coding", "search", "orchestrator"):
        scores = []
        for i in range(300):
            task = make_task(family, rng, str(i))
            _play(task, rng)
            scores.append(task.outcome().score)
        assert 0.25 < sum(scores) / len(scores) < 0.65, family


def test_answered_right_sets_how_often_an_agent_that_asked_edits_right_next():
    def right_edit(prompt):  # "coding files a b c bug <bug> in <file> asked :"
        bug, buggy_file = prompt.split(" bug ")[1].split()[0], prompt.split(" in ")[1].split()[0]
        return f"edit {buggy_file} {FIXES[BUGS.index(bug)]}"

    def after_a_question(answered_right):
        demos = make_demonstrations(300, seed=2, answered_right=answered_right)
        answered = [d for d in demos if d.prompt.startswith("coding ") and d.prompt.endswith(" asked :")]
        return sum(d.completion == right_edit(d.prompt) for d in answered) / len(answered)

    assert after_a_question(1.0) == 1.0
    assert after_a_question(0.0) == 0.0
    assert 0.25 < after_a_question(0.4) < 0.55


def test_the_default_demonstrations_do_not_depend_on_answered_right_being_named():
    from demo.policy.demonstrations import RECOVERY

    assert make_demonstrations(50, seed=3) == make_demonstrations(50, seed=3, answered_right=RECOVERY)


def test_answer_top_sets_how_often_a_search_is_answered_with_the_top_ranked_chunk_alone():
    def short_answers(answer_top):
        demos = make_demonstrations(300, seed=2, answer_top=answer_top)
        answers = [d for d in demos if d.prompt.startswith("search ") and d.completion.startswith("answer ")]
        short = [d for d in answers if len(d.completion.split()) == 2]
        # a short answer cites the first chunk in context, which a focused search ranks gold
        assert all(d.prompt.split(" ctx ")[1].split()[0] == d.completion.split()[1] for d in short)
        return len(short) / len(answers)

    assert short_answers(0.0) == 0.0
    assert 0.15 < short_answers(0.3) < 0.4  # (a pruned broad search's context is unranked: answered as before)
    assert make_demonstrations(50, seed=3) == make_demonstrations(50, seed=3, answer_top=0.0)
