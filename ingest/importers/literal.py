"""A bounded reader of the Python literals some loggers wrote instead of JSON (a list's repr).

`ast.literal_eval` builds a full syntax tree first: a few megabytes of client text cost seconds and
gigabytes. This reads only what a repr of JSON-like data holds (lists, tuples, dicts, strings, numbers,
True/False/None), in one pass over tokens, with the text's length, the item count and the nesting
depth bounded, so the cost is linear and capped whatever the text.
"""

from __future__ import annotations

import ast
import re

MAX_CHARS = 1 << 20  # a tool-call list longer than this is not a repr worth reading
MAX_ITEMS = 10_000  # values in all, containers included
MAX_DEPTH = 32

_TOKEN = re.compile(r"""\s*(?:(?P<punct>[\[\]{}(),:])|(?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
                    r"""|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>True|False|None))""", re.ASCII)
_NAMES = {"True": True, "False": False, "None": None}
_CLOSE = {"[": "]", "(": ")", "{": "}"}


def python_literal(text: str, max_chars: int = MAX_CHARS, max_items: int = MAX_ITEMS, max_depth: int = MAX_DEPTH):
    """The value of a Python literal of plain data; ValueError when it is not one or passes a bound."""
    if len(text) > max_chars:
        raise ValueError(f"the literal is {len(text)} characters, over the {max_chars}-character limit")
    tokens = _tokens(text)
    stack: list[tuple[str, list, list]] = []  # (opener, items, pending dict key or nothing)
    items = 0
    value, have_value = None, False
    for kind, token in tokens:
        if have_value and not stack:
            raise ValueError("text after the literal's end")
        if kind == "punct" and token in _CLOSE:
            if have_value:
                raise ValueError("two values without a comma between them")
            if len(stack) >= max_depth:
                raise ValueError(f"the literal nests deeper than {max_depth}")
            stack.append((token, [], []))
            have_value = False
            continue
        if kind == "punct" and token in ("]", ")", "}"):
            if not stack or _CLOSE[stack[-1][0]] != token:
                raise ValueError(f"unbalanced {token!r}")
            opener, content, key = stack.pop()
            if have_value:
                _add(content, key, value, opener)
            elif key:
                raise ValueError("a dict key without its value")
            value, have_value = _built(opener, content), True
            continue
        if kind == "punct" and token in (",", ":"):
            if not stack or not have_value:
                raise ValueError(f"unexpected {token!r}")
            opener, content, key = stack[-1]
            if token == ":":
                if opener != "{" or key:
                    raise ValueError("unexpected ':'")
                key.append(value)
            else:
                _add(content, key, value, opener)
            have_value = False
            continue
        if have_value:
            raise ValueError("two values without a comma between them")
        items += 1
        if items > max_items:
            raise ValueError(f"the literal holds more than {max_items} values")
        value, have_value = _scalar(kind, token), True
    if stack or not have_value:
        raise ValueError("the literal ends early")
    return value


def _tokens(text: str):
    position, end = 0, len(text)
    while True:
        match = _TOKEN.match(text, position)
        if match is None:
            if text[position:].strip():
                raise ValueError(f"not a literal of plain data at character {position}")
            return
        position = match.end()
        kind = match.lastgroup
        yield kind, match.group(kind)
        if position >= end:
            return


def _scalar(kind: str, token: str):
    if kind == "string":
        return ast.literal_eval(token)  # one string token: linear, and it knows every escape
    if kind == "number":
        return float(token) if any(c in token for c in ".eE") else int(token)
    return _NAMES[token]


def _add(content: list, key: list, value, opener: str) -> None:
    if opener == "{":
        if not key:
            raise ValueError("a dict entry without a key")
        content.append((key.pop(), value))
    else:
        content.append(value)


def _built(opener: str, content: list):
    if opener == "{":
        try:
            return dict(content)
        except TypeError:
            raise ValueError("a dict key that is not a plain value") from None
    return content if opener == "[" else tuple(content)
