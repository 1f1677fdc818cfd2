"""The tool-call grammar the policy speaks: one call per completion, words separated by spaces.

    edit file_3 fix_null            ask_user
    search topic_2 | search all     prune_chunks c_4 c_9      answer c_1 c_7
    create_subagent 2               assign_task sub_1 part_1 sub_2 part_2
    done

A completion that does not parse, or names a tool its task family does not offer, becomes a ParsedCall
with valid=False and an error: broken calls are recorded and count against the agent, never dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

N_FILES = 8
FIXES = ("fix_null", "fix_index", "fix_type", "fix_import")
BUGS = ("null", "index", "type", "import")  # BUGS[i] is fixed by FIXES[i]
N_TOPICS = 8
N_CHUNKS = 16
MAX_SUBAGENTS = 3
MAX_PARTS = 3

FILES = tuple(f"file_{i}" for i in range(N_FILES))
TOPICS = tuple(f"topic_{i}" for i in range(N_TOPICS))
CHUNKS = tuple(f"c_{i}" for i in range(N_CHUNKS))
SUBAGENTS = tuple(f"sub_{i}" for i in range(1, MAX_SUBAGENTS + 1))
PARTS = tuple(f"part_{i}" for i in range(1, MAX_PARTS + 1))
TOOLS = ("edit", "ask_user", "search", "prune_chunks", "answer", "create_subagent", "assign_task", "done")
EOS = "<eos>"
MAX_CHUNK_ARGS = 4


@dataclass(frozen=True)
class ParsedCall:
    """A parsed completion. Produced by parse_tool_call, consumed by the task environments and the recorder."""

    name: str  # the tool, or the first word (possibly "") when the call is broken
    args: tuple[str, ...] = ()
    valid: bool = True
    error: str = ""
    text: str = ""  # the completion as the policy wrote it
    kwargs: dict = field(default_factory=dict, compare=False)

    def arguments_json(self) -> str:
        return json.dumps(self.kwargs if self.valid else {"raw": self.text}, sort_keys=True)


def parse_tool_call(text: str, allowed: frozenset[str] | set[str] | None = None) -> ParsedCall:
    """Parse one completion; never raises. `allowed`: the tools of the task family (None: every tool)."""
    words = [w for w in text.replace(EOS, " ").split() if w]
    if not words:
        return _broken("", text, "empty completion: expected a tool call")
    name, args = words[0], tuple(words[1:])
    if name not in TOOLS:
        return _broken(name, text, f"unknown tool {name!r}; expected one of {', '.join(TOOLS)}")
    if allowed is not None and name not in allowed:
        return _broken(name, text, f"tool {name!r} is not available here; available: {', '.join(sorted(allowed))}")
    try:
        kwargs = _ARGUMENT_PARSERS[name](args)
    except ValueError as error:
        return _broken(name, text, f"{name}: {error}")
    return ParsedCall(name=name, args=args, valid=True, text=text, kwargs=kwargs)


def _broken(name: str, text: str, error: str) -> ParsedCall:
    return ParsedCall(name=name, args=(), valid=False, error=error, text=text)


def _expect(args: tuple[str, ...], count: int, usage: str) -> None:
    if len(args) != count:
        raise ValueError(f"takes {count} argument(s), got {len(args)}; usage: {usage}")


def _one_of(word: str, choices: tuple[str, ...], what: str) -> str:
    if word not in choices:
        raise ValueError(f"{word!r} is not a {what}")
    return word


def _parse_edit(args):
    _expect(args, 2, "edit FILE FIX")
    return {"file": _one_of(args[0], FILES, "file"), "fix": _one_of(args[1], FIXES, "fix")}


def _parse_search(args):
    _expect(args, 1, "search TOPIC | search all")
    return {"query": args[0] if args[0] == "all" else _one_of(args[0], TOPICS, "topic")}


def _parse_chunks(args):
    if not 1 <= len(args) <= MAX_CHUNK_ARGS:
        raise ValueError(f"takes 1 to {MAX_CHUNK_ARGS} chunk ids, got {len(args)}")
    if len(set(args)) != len(args):
        raise ValueError("repeats a chunk id")
    return {"chunk_ids": [_one_of(a, CHUNKS, "chunk id") for a in args]}  # rewards.tools.prune_ids_key


def _parse_create(args):
    _expect(args, 1, "create_subagent N (1 to 3)")
    if args[0] not in ("1", "2", "3"):
        raise ValueError(f"{args[0]!r} is not a count from 1 to {MAX_SUBAGENTS}")
    return {"count": int(args[0])}


def _parse_assign(args):
    if not args or len(args) % 2 or len(args) > 2 * MAX_SUBAGENTS:
        raise ValueError("usage: assign_task SUB PART [SUB PART ...] (1 to 3 pairs)")
    pairs = [(_one_of(s, SUBAGENTS, "sub-agent"), _one_of(p, PARTS, "part")) for s, p in zip(args[::2], args[1::2])]
    if len({s for s, _ in pairs}) != len(pairs) or len({p for _, p in pairs}) != len(pairs):
        raise ValueError("a sub-agent or a part appears twice")
    return {"assignments": pairs}


def _no_args(usage: str):
    def parse(args):
        _expect(args, 0, usage)
        return {}

    return parse


_ARGUMENT_PARSERS = {
    "edit": _parse_edit,
    "ask_user": _no_args("ask_user"),
    "search": _parse_search,
    "prune_chunks": _parse_chunks,
    "answer": _parse_chunks,
    "create_subagent": _parse_create,
    "assign_task": _parse_assign,
    "done": _no_args("done"),
}
