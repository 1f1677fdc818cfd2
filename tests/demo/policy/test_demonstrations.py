import random
from collections import Counter

from demo.policy.demonstrations import _play, make_demonstrations
from demo.policy.vocabulary import VOCABULARY
from demo.product.grammar import parse_tool_call
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
