"""Token chains, loss masks, spans, segments and the session checks, on hand-built sessions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liverl.config.rewards import RewardsConfig
from liverl.rewards.session import SessionRecord
from pipelines import dead_letters
from pipelines.trajectories import build_rows, chain_tokens, check_session, trajectory_id
from tests.pipelines.producing import call, coding_session, orchestrator_session


def _session(events, calls) -> SessionRecord:
    return SessionRecord(events[0].session_id, "demo", tuple(events), tuple(calls))


def test_chain_appends_context_delta_and_completions_with_masks_and_logprobs():
    calls = [call("s", 0, "r1", [1, 2], [3], logprobs=[-0.1]),
             call("s", 1, "r2", [1, 2, 3, 7, 8], [9, 10], logprobs=[-0.2, -0.3], version="2")]
    chain = chain_tokens(calls, trainable=True)
    assert chain["token_ids"] == [1, 2, 3, 7, 8, 9, 10]
    assert chain["loss_mask"] == [0, 0, 1, 0, 0, 1, 1]
    assert chain["behaviour_logprobs"] == pytest.approx([0.0, 0.0, -0.1, 0.0, 0.0, -0.2, -0.3])
    assert (chain["span_starts"], chain["span_ends"], chain["span_policy_versions"]) == ([0, 3], [3, 7], ["1", "2"])
    assert chain["segment_starts"] == [0] and chain["policy_versions"] == ["1", "2"]


def test_rewritten_context_starts_a_new_segment_in_the_same_trajectory():
    calls = [call("s", 0, "r1", [1, 2], [3]), call("s", 1, "r2", [5, 6], [7])]  # r2 does not extend [1, 2, 3]
    chain = chain_tokens(calls, trainable=True)
    assert chain["token_ids"] == [1, 2, 3, 5, 6, 7]
    assert chain["segment_starts"] == [0, 3]
    assert chain["loss_mask"] == [0, 0, 1, 0, 0, 1]


def test_frozen_subagent_tokens_are_observations():
    chain = chain_tokens([call("s", 0, "r1", [1], [2, 3])], trainable=False)
    assert chain["loss_mask"] == [0, 0, 0] and chain["behaviour_logprobs"] == [0.0, 0.0, 0.0]


def test_rows_carry_graph_rewards_and_deterministic_ids():
    rows, dead = build_rows(_session(*orchestrator_session("o")), RewardsConfig(), "b-1", 5)
    assert dead == []
    by_agent = {row.agent_id: row for row in rows}
    assert by_agent["main"].agent_role == "orchestrator" and by_agent["main"].parent_agent_id is None
    sub = by_agent["sub-1"]
    assert sub.agent_role == "subagent" and sub.parent_agent_id == "main"
    assert sub.signals["spawn_stage"] == 1.0 and set(sub.loss_mask) == {0}
    assert by_agent["main"].reward_components["outcome"] == 0.5
    assert by_agent["main"].reward_config_version == RewardsConfig().version
    assert by_agent["main"].trajectory_id == trajectory_id("demo", "o", "main")
    assert by_agent["main"].batch_id == "b-1" and by_agent["main"].distilled_at_ms == 5


def test_self_summarised_session_is_one_trajectory_with_two_segments():
    rows, _ = build_rows(_session(*coding_session("c")), RewardsConfig(), "b", 0)
    (row,) = rows
    assert row.segment_starts == [0, 8] and row.num_model_calls == 3
    assert row.span_policy_versions == ["1", "2", "2"]
    assert len(row.token_ids) == len(row.loss_mask) == len(row.behaviour_logprobs)


def test_token_mismatch_and_missing_model_call_are_detected():
    events, calls = coding_session("m")
    bad = list(calls)
    bad[0] = call("m", 2, "m-r1", [1], [4, 5], logprobs=[-1.0])  # two tokens, one logprob
    assert check_session(_session(events, bad))[0] == dead_letters.TOKEN_MISMATCH
    assert check_session(_session(events, calls[1:]))[0] == dead_letters.MISSING_MODEL_CALL  # m-r1 gone
    assert check_session(_session(events, calls)) is None


def test_a_failing_reward_library_dead_letters_the_trajectory_without_raising():
    def broken_label(session, agent_id, config):
        raise ZeroDivisionError("bad component")

    rows, dead = build_rows(_session(*coding_session("f")), RewardsConfig(), "b", 0, label_fn=broken_label)
    assert rows == [] and [d["reason"] for d in dead] == [dead_letters.LABEL_FAILED]
    assert "ZeroDivisionError" in dead[0]["message"]


@settings(max_examples=100, deadline=None)
@given(turns=st.lists(st.tuples(st.lists(st.integers(0, 50), max_size=5), st.lists(st.integers(0, 50), max_size=4),
                                 st.booleans()), min_size=1, max_size=6),
       trainable=st.booleans())
def test_chains_stay_aligned_and_mask_exactly_the_sampled_tokens(turns, trainable):
    """Each turn: new context, a completion, and whether the next prompt rewrites the context."""
    calls, context = [], []
    for i, (delta, completion, rewrite) in enumerate(turns):
        prompt = ([99] if rewrite else context) + delta
        calls.append(call("s", i, f"r{i}", prompt, completion))
        context = prompt + completion
    chain = chain_tokens(calls, trainable)
    assert len(chain["token_ids"]) == len(chain["loss_mask"]) == len(chain["behaviour_logprobs"])
    assert sum(chain["loss_mask"]) == (sum(len(c) for _, c, _ in turns) if trainable else 0)
    assert chain["span_ends"][-1] == len(chain["token_ids"]) and chain["segment_starts"][0] == 0


def test_with_the_judge_enabled_trainable_trajectories_get_its_verdict():
    from liverl.rewards.judge import Judge
    from tests.judge_double import JudgeDouble, Reply

    with JudgeDouble(lambda request: Reply(content="8")) as server:
        rewards = RewardsConfig.model_validate({"judge": {"enabled": True, "base_url": server.base_url}})
        with Judge(rewards.judge) as judge:
            rows, dead = build_rows(_session(*orchestrator_session("j")), rewards, "b", 0, judge=judge)
        assert server.requests  # one judge_many for the session's trainable agent
    by_agent = {row.agent_id: row for row in rows}
    assert dead == [] and "judge" in by_agent["main"].reward_components
    assert "judge" not in by_agent["sub-1"].reward_components  # frozen sub-agents are not judged


def test_spans_carry_the_sampling_parameters_and_unknown_times_are_none():
    from liverl.v1.common_pb2 import SamplingParams

    greedy = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_tokens=4)  # as serving records greedy
    nucleus = SamplingParams(temperature=0.7, top_p=0.9, top_k=-1, max_tokens=4)
    calls = [call("s", 0, "r1", [1], [2], sampling=greedy), call("s", 1, "r2", [1, 2, 3], [4], sampling=nucleus)]
    chain = chain_tokens(calls, trainable=True)
    assert chain["span_temperature"] == [0.0, pytest.approx(0.7)]
    assert chain["span_top_p"] == [1.0, pytest.approx(0.9)] and chain["span_top_k"] == [0, 0]

    unrecorded = call("s", 2, "r3", [9], [8])
    unrecorded.ClearField("sampling")  # a producer that does not know: the span reads as "unknown"
    empty = call("s", 3, "r4", [7], [6], sampling=SamplingParams())
    empty.sampling.Clear()
    chain = chain_tokens([calls[0], unrecorded, empty], trainable=True)
    # unknown: a NaN temperature (the trainer leaves such tokens unscorable), never a guessed temperature 1
    assert chain["span_temperature"][0] == 0.0 and all(math.isnan(t) for t in chain["span_temperature"][1:])
    assert chain["span_top_p"] == [1.0, 1.0, 1.0]
    assert chain_tokens([unrecorded], trainable=True)["span_temperature"] == []  # nothing known: empty columns

    # Logprobs serving could not record exactly (NaN: an upstream server that did not return them): unscorable too,
    # whatever sampling the call names
    inexact = call("s", 4, "r5", [5], [6, 7], logprobs=[float("nan"), float("nan")], sampling=nucleus)
    chain = chain_tokens([calls[0], inexact], trainable=True)
    assert chain["span_temperature"][0] == 0.0 and math.isnan(chain["span_temperature"][1])

    events, session_calls = coding_session("t")
    for c in session_calls:
        c.request_time_ms = 0  # a producer that did not stamp its calls
    (row,) = build_rows(_session(events, session_calls), RewardsConfig(), "b", 0)[0]
    assert row.first_served_ms is None and row.session_start_ms == events[0].event_time_ms
    assert len(row.span_temperature) == len(row.span_starts) == 3
