"""Tool calls some loggers wrote as a Python repr are read by a bounded parser, never ast.literal_eval:
a multi-megabyte literal from a client costs milliseconds, and only plain data is ever read."""

from __future__ import annotations

import time

import pytest

from ingest.importers.chat import tool_calls_of
from ingest.importers.literal import python_literal
from ingest.importers.model import TooManyEvents


def test_a_repr_of_tool_calls_is_read():
    text = "[{'id': 'c1', 'type': 'function', 'function': {'name': 'edit', 'arguments': '{\"f\": \"a.py\"}'}}]"
    (call,) = tool_calls_of({"tool_calls": text}, "x")
    assert (call.call_id, call.name, call.arguments_json, call.valid) == ("c1", "edit", '{"f": "a.py"}', True)
    assert python_literal("(1, -2.5e3, True, None, 'a\\'b', \"c\", [], {})") == (1, -2500.0, True, None, "a'b", "c",
                                                                               [], {})


@pytest.mark.parametrize("text", ["__import__('os').system('id')", "[1 2]", "[1,,2]", "{'a'}", "[" * 100 + "]" * 100,
                                  "'a' * 10**9", "[1] [2]", "{[1]: 2}", "", "[", "f'{x}'"])
def test_anything_but_plain_data_is_refused(text):
    with pytest.raises(ValueError):
        python_literal(text)


def test_a_huge_literal_costs_milliseconds_and_comes_back_invalid():
    huge = "[" + ", ".join(["{'id': 'c', 'function': {'name': 'n', 'arguments': '{}'}}"] * 70_000) + "]"  # ~4 MB
    started = time.monotonic()
    (call,) = tool_calls_of({"tool_calls": huge}, "x")
    assert time.monotonic() - started < 2.0
    assert not call.valid and "neither JSON nor a literal" in call.error and len(call.arguments_json) <= 1000
    many = "[" + ", ".join(["{}"] * 9_000) + "]"  # under the literal's bounds, over the caller's limit
    with pytest.raises(TooManyEvents):
        tool_calls_of({"tool_calls": many}, "x", limit=100)
