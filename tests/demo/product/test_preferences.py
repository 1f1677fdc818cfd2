import random

import pytest

from demo.product.feedback import DelayedFeedback
from demo.product.memory_recorder import MemoryRecorder
from demo.product.preferences import PROFILES, UNWANTED, tenant_profiles
from demo.product.session import run_session
from demo.product.tasks import CodingTask, OrchestratorTask, SearchTask
from demo.product.user import SimulatedUser
from tests.demo.product.test_session import ScriptedPolicy

BRISK, CAREFUL, FRUGAL = PROFILES


def play(task, answer, profile=None):
    """One session of `task` with a scripted agent; its stats and the recorded outcome score."""
    recorder, feedback = MemoryRecorder(), DelayedFeedback()
    stats = run_session(task, ScriptedPolicy(answer), recorder, random.Random(0), user=SimulatedUser(),
                        feedback=feedback, feedback_delay_s=0.0, user_id="u1",
                        judge=profile.judge if profile else None)
    feedback.close()
    outcome = next(e for e in recorder.of_session(stats.session_id) if e.kind == "outcome")
    return stats, outcome.fields["score"]


def coding(ask_first: bool):
    task = CodingTask(random.Random(3), "c")
    return task, lambda prompt: task.right_edit if (not ask_first or "asked" in prompt) else "ask_user"


@pytest.mark.parametrize("ask_first, brisk, careful", [(False, 1.0, UNWANTED), (True, UNWANTED, 1.0)])
def test_brisk_and_careful_want_opposite_things_on_the_same_coding_task(ask_first, brisk, careful):
    for profile, expected in [(BRISK, brisk), (CAREFUL, careful)]:
        stats, recorded = play(*coding(ask_first), profile)
        assert stats.reward == recorded == expected, profile.name  # the served reward is what the Outcome says


def test_without_a_judge_the_product_scores_as_before():
    stats, recorded = play(*coding(ask_first=True))
    assert stats.reward == recorded == 0.5


def orchestrate(one_agent: bool):
    task = OrchestratorTask(random.Random(4), "o")

    def answer(prompt):
        if prompt.startswith("subagent"):
            return "done"
        if "agents none" in prompt:
            return "create_subagent 1" if one_agent else f"create_subagent {task.n_parts}"
        if one_agent:
            return f"assign_task sub_1 {task.todo[0]}"
        return "assign_task " + " ".join(f"sub_{i + 1} {part}" for i, part in enumerate(task.todo))

    return task, answer


def test_brisk_and_frugal_want_opposite_things_on_the_same_orchestrator_task():
    fan_out = {p.name: play(*orchestrate(one_agent=False), p)[0] for p in (BRISK, FRUGAL)}
    serial = {p.name: play(*orchestrate(one_agent=True), p)[0] for p in (BRISK, FRUGAL)}
    assert all(s.success for s in [*fan_out.values(), *serial.values()])  # the job is done either way
    assert fan_out["brisk"].reward > fan_out["frugal"].reward
    assert serial["frugal"].reward > serial["brisk"].reward


def search(cited: int):
    """A focused search, then an answer citing the `cited` best-ranked chunks (the gold ones come first)."""
    task = SearchTask(random.Random(5), "s")
    return task, lambda prompt: f"search {task.topic}" if " ctx " not in prompt else f"answer {' '.join(task.context[:cited])}"


def test_brisk_wants_a_search_answered_with_one_chunk_where_frugal_scores_both_as_the_product_does():
    one = {p: play(*search(cited=1), p) for p in (BRISK, FRUGAL, None)}
    both = {p: play(*search(cited=2), p) for p in (BRISK, FRUGAL, None)}
    assert one[BRISK][1] == 1.0 and both[BRISK][1] == UNWANTED
    assert both[None][1] == 1.0 and one[None][1] == pytest.approx(2 / 3, abs=1e-4)  # F1 against both gold chunks
    assert one[FRUGAL][1] == one[None][1] and both[FRUGAL][1] == both[None][1]
    assert "search" in BRISK.families and "search" in FRUGAL.families


def test_a_solved_task_keeps_a_score_above_zero():
    """A score of exactly 0 reads as unset, and a success as 1.0 (liverl/rewards/components/outcome.py)."""
    task = OrchestratorTask(random.Random(4), "o")
    task.done_parts, task.agents, task.worked, task.stages = set(task.todo), ["sub_1", "sub_2"], {"sub_1"}, 2
    task.broken_calls = 2
    report = BRISK.judge(task, task.outcome())
    assert report.success and report.score == 0.01


def test_tenant_profiles_refuses_a_count_past_the_defined_tenants():
    assert [p.name for p in tenant_profiles(2)] == ["brisk", "careful"]
    with pytest.raises(ValueError, match="choose --tenants from 1 to 3"):
        tenant_profiles(4)
