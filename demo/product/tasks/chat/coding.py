"""Coding task: write one small Python function; it passes when its unit tests pass in the sandbox.

Templates range from one-liners (add a constant) to small loops (count the vowels); the parameter K and the
function's name vary, so the task space holds 585 distinct tasks. Five templates are held out whole
(HELDOUT_TEMPLATES: descriptions training never sees), two for dev and three for the final test, spanning a
one-liner, a string slice and a loop; the other ten train. One policy call of at most MAX_TOKENS
tokens; the code is the first fenced block of the reply (or, without a fence, the reply from its first `def`).
Score 1 when every assertion passes, else 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from demo.product.tasks.base import OutcomeReport
from demo.product.tasks.chat.base import DEV, FINAL, ChatTask, ChatTaskRequest, user_chat
from demo.product.tasks.chat.sandbox import SandboxLimits, run_tests

MAX_TOKENS = 96
LIMITS = SandboxLimits(wall_s=5.0, cpu_s=3, memory_mb=256)


@dataclass(frozen=True)
class Template:
    """A family of functions: `describe` and `reference` take the parameter K."""

    id: str
    names: tuple[str, ...]
    signature: str  # the arguments, e.g. "x" or "a, b"
    describe: Callable[[int], str]
    reference: Callable[[int], Callable]
    cases: tuple[tuple, ...]  # argument tuples the tests call with
    k_range: range = range(2, 21)


TEMPLATES = (
    Template("add", ("add_k", "plus", "increase"), "x", lambda k: f"returns x plus {k}",
             lambda k: lambda x: x + k, ((0,), (5,), (-3,))),
    Template("mul", ("times", "scale", "multiply"), "x", lambda k: f"returns x multiplied by {k}",
             lambda k: lambda x: x * k, ((1,), (4,), (-2,))),
    Template("sub", ("minus", "decrease", "take_away"), "x", lambda k: f"returns x minus {k}",
             lambda k: lambda x: x - k, ((10,), (0,), (3,))),
    Template("divisible", ("is_multiple", "divides", "check_multiple"), "n",
             lambda k: f"returns True if n is divisible by {k}, otherwise False",
             lambda k: lambda n: n % k == 0, ((0,), (1,), (7,), (12,), (30,))),
    Template("greater", ("is_big", "above", "exceeds"), "x", lambda k: f"returns True if x is greater than {k}",
             lambda k: lambda x: x > k, ((0,), (100,), (-5,))),
    Template("prefix", ("first_chars", "head", "prefix"), "s", lambda k: f"returns the first {k} characters of s",
             lambda k: lambda s: s[:k], (("abcdefghijklmnop",), ("hello world",), ("xy",))),
    Template("repeat", ("repeat", "copies", "echo"), "s", lambda k: f"returns the string s repeated {k} times",
             lambda k: lambda s: s * k, (("ab",), ("x",), ("",))),
    Template("square_plus", ("square_plus", "sq_add", "poly"), "x", lambda k: f"returns x squared plus {k}",
             lambda k: lambda x: x * x + k, ((0,), (3,), (-4,))),
    Template("largest", ("largest", "biggest", "top"), "nums",
             lambda k: "returns the largest number in the list nums",
             lambda k: lambda nums: max(nums), (([3, 9, 2],), ([-5, -1, -7],), ([4],)), range(1, 2)),
    Template("total", ("total", "sum_all", "add_up"), "nums", lambda k: "returns the sum of the numbers in the list nums",
             lambda k: lambda nums: sum(nums), (([1, 2, 3],), ([],), ([-4, 10],)), range(1, 2)),
    Template("reverse", ("reverse", "backwards", "flip"), "s", lambda k: "returns the string s reversed",
             lambda k: lambda s: s[::-1], (("abc",), ("racecar",), ("",)), range(1, 2)),
    Template("vowels", ("count_vowels", "vowels", "num_vowels"), "s",
             lambda k: "returns how many vowels (a, e, i, o, u) the lowercase string s contains",
             lambda k: lambda s: sum(c in "aeiou" for c in s), (("hello",), ("sky",), ("banana",)), range(1, 2)),
    Template("count_above", ("count_above", "how_many_above", "above_count"), "nums",
             lambda k: f"returns how many numbers in the list nums are greater than {k}",
             lambda k: lambda nums: sum(n > k for n in nums), (([1, 5, 20, 30],), ([],), ([100, 3, 50],))),
    Template("clip", ("clip", "cap", "limit"), "x", lambda k: f"returns x, but never more than {k}",
             lambda k: lambda x: min(x, k), ((0,), (50,), (-9,))),
    Template("last", ("last", "final", "tail"), "items", lambda k: "returns the last element of the list items",
             lambda k: lambda items: items[-1], (([1, 2, 3],), (["a"],), ([7, 7, 8],)), range(1, 2)),
)
TEMPLATES_BY_ID = {template.id: template for template in TEMPLATES}
# Held out whole, each with its split (demo/product/tasks/chat/base.py): dev a one-liner and a comparison, final a
# one-liner, a string slice and a counting loop, so that the final test spans the kinds of function training has.
HELDOUT_TEMPLATES = {"square_plus": DEV, "clip": DEV, "sub": FINAL, "prefix": FINAL, "count_above": FINAL}


def coding_keys() -> list[str]:
    """Every coding task's key: coding/<template>/<name>/<K>."""
    return [f"coding/{t.id}/{name}/{k}" for t in TEMPLATES for name in t.names for k in t.k_range]


class ChatCodingTask(ChatTask):
    family = "coding"
    HELDOUT_TEMPLATES = HELDOUT_TEMPLATES

    @classmethod
    def templates_of(cls, key: str) -> tuple[str, ...]:
        return (key.split("/")[1],)

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(task_id, key)
        _, template_id, self.name, k = key.split("/")
        self.template = TEMPLATES_BY_ID[template_id]
        self.k = int(k)
        self.result = None

    def request_text(self) -> str:
        t = self.template
        return (f"Write a Python function `{self.name}({t.signature})` that {t.describe(self.k)}. "
                "Reply with only the code.")

    def tests(self) -> str:
        reference = self.template.reference(self.k)
        lines = []
        for args in self.template.cases:
            call = f"{self.name}({', '.join(repr(a) for a in args)})"
            lines.append(f"assert {call} == {reference(*args)!r}, {call!r}")
        return "\n".join(lines) + "\n"

    def requests(self) -> list[ChatTaskRequest]:
        return [] if self.done else [ChatTaskRequest(user_chat(self.request_text()), MAX_TOKENS, self.agent_role)]

    def respond(self, texts: list[str]) -> None:
        (text,) = texts
        self.transcript.append((self.agent_role, text))
        self.result = run_tests(extract_code(text), self.tests(), LIMITS)
        self.done = True

    def outcome(self) -> OutcomeReport:
        passed = bool(self.result and self.result.passed)
        detail = self.result.reason if self.result else "no reply"
        return OutcomeReport(success=passed, score=float(passed), detail=f"unit tests: {detail}",
                             metrics={"sandbox_s": self.result.seconds if self.result else 0.0})


FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced block (an unclosed one runs to the end); without a fence, the text from its first `def`."""
    fenced = FENCE.search(text)
    if fenced:
        return fenced.group(1)
    start = text.find("def ")
    return text[start:] if start >= 0 else text
