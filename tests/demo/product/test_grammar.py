from hypothesis import given
from hypothesis import strategies as st

from demo.policy.vocabulary import VOCABULARY
from demo.product.grammar import TOOLS, parse_tool_call


def test_well_formed_calls_parse_into_arguments():
    assert parse_tool_call("edit file_3 fix_null").kwargs == {"file": "file_3", "fix": "fix_null"}
    assert parse_tool_call("search all <eos>").kwargs == {"query": "all"}
    assert parse_tool_call("prune_chunks c_1 c_9").kwargs == {"chunk_ids": ["c_1", "c_9"]}
    assert parse_tool_call("create_subagent 2").kwargs == {"count": 2}
    call = parse_tool_call("assign_task sub_1 part_1 sub_2 part_2")
    assert call.valid and call.kwargs == {"assignments": [("sub_1", "part_1"), ("sub_2", "part_2")]}
    assert parse_tool_call("ask_user").valid and parse_tool_call("done").valid


def test_broken_calls_are_kept_with_a_reason():
    cases = {
        "": "empty",
        "edit fix_null": "takes 2 argument",
        "file_3 fix_null": "unknown tool",
        "edit file_3 fix_bogus": "not a fix",
        "search": "takes 1 argument",
        "answer c_1 c_1": "repeats",
        "answer c_1 c_2 c_3 c_4 c_5": "1 to 4",
        "create_subagent 4": "count from 1 to 3",
        "assign_task part_1": "usage",
        "assign_task sub_1 part_1 sub_1 part_2": "twice",
        "ask_user now": "takes 0 argument",
    }
    for text, reason in cases.items():
        call = parse_tool_call(text)
        assert not call.valid, text
        assert reason in call.error, (text, call.error)
        assert call.text == text
        assert '"raw"' in call.arguments_json()


def test_a_tool_outside_the_family_is_invalid():
    call = parse_tool_call("search topic_1", allowed={"edit", "ask_user"})
    assert not call.valid and "not available" in call.error


@given(st.lists(st.sampled_from([*VOCABULARY, "x", "<eos>", "1", "2"]), max_size=10))
def test_parse_never_raises_on_any_completion(words):
    call = parse_tool_call(" ".join(words))
    assert call.valid or call.error
    assert not call.valid or call.name in TOOLS
