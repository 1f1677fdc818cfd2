"""What a real-model task offers its runner: chat requests out, completion texts in, a verifiable outcome.

A task is a small state machine. `requests()` lists the chats to complete now (the trained policy's, or a
frozen sub-agent's); `respond(texts)` takes their completions in the same order and advances the task; when
`done`, `outcome()` is the verifiable result (demo.product.tasks.base.OutcomeReport, as the toy tasks report
it). Runners batch the requests of many tasks into one engine call (demo/evaluate/heldout_success.py).

Held out versus training. Every task has a `key` naming its content (family, template and parameters, or
question ids) and uses one or more templates (a coding description, a kind of corpus fact). A family holds some
templates out whole (its HELDOUT_TEMPLATES): every key using one is held out, OUT_OF_TEMPLATE, a description
training never saw. Of the keys that use training templates only, `key_split` holds a fixed quarter out by the
key's hash, IN_TEMPLATE (a task training never drew, of a kind it did). Held-out keys are split again into DEV,
the split configs are tuned on, and FINAL, the split the demo reports and nothing is tuned on: a held-out
template belongs to one of the two, and a key using templates of both is FINAL, so DEV never shows a final
template. The training generator draws only TRAINING keys and the held-out generator only DEV or FINAL keys, so
the two never share a task (nor a held-out template) whatever their seeds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from demo.product.policy import ROLE_SINGLE
from demo.product.tasks.base import OutcomeReport

TRAINING = "training"
DEV = "dev"  # held out; configs are tuned on it
FINAL = "final"  # held out; the demo's closing measure, never tuned on
HELDOUT_SPLITS = (DEV, FINAL)
OUT_OF_TEMPLATE = "out-of-template"  # a held-out task of a template training never drew
IN_TEMPLATE = "in-template"  # a held-out task of training templates only (its key never trained on)
PARTS = (OUT_OF_TEMPLATE, IN_TEMPLATE)
KEY_BUCKETS = 8  # of the keys of training templates, bucket 0 is dev and bucket 1 final: one in four held out


def key_split(key: str) -> str:
    """The split of a key of training templates only, fixed by its hash (independent of any seed)."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % KEY_BUCKETS
    return DEV if bucket == 0 else FINAL if bucket == 1 else TRAINING


def split_of(key: str, template_splits: Iterable[str] = ()) -> str:
    """The split of a key whose templates are in `template_splits` (TRAINING, DEV or FINAL each): a held-out
    template holds the key out with it (FINAL before DEV); training templates only, the key's hash decides."""
    held = set(template_splits)
    if FINAL in held:
        return FINAL
    if DEV in held:
        return DEV
    return key_split(key)


@dataclass(frozen=True)
class ChatTaskRequest:
    """One completion a task needs now."""

    messages: tuple[dict, ...]  # chat messages [{"role": ..., "content": ...}], rendered by the model's template
    max_tokens: int
    role: str = ROLE_SINGLE  # ROLE_SINGLE / ROLE_ORCHESTRATOR: the trained policy; ROLE_SUBAGENT: a frozen copy


class ChatTask:
    family: str = ""
    agent_role: str = ROLE_SINGLE
    HELDOUT_TEMPLATES: ClassVar[dict[str, str]] = {}  # template -> DEV or FINAL; the rest are training templates

    def __init__(self, task_id: str, key: str) -> None:
        self.task_id = task_id
        self.key = key
        self.done = False
        self.transcript: list[tuple[str, str]] = []  # (role, completion) in order, for reports and training

    @classmethod
    def templates_of(cls, key: str) -> tuple[str, ...]:
        """The templates a key uses (a family without templates: none)."""
        return ()

    @classmethod
    def split_of_key(cls, key: str) -> str:
        return split_of(key, (cls.HELDOUT_TEMPLATES.get(t, TRAINING) for t in cls.templates_of(key)))

    @classmethod
    def part_of_key(cls, key: str) -> str:
        """OUT_OF_TEMPLATE when the key uses a held-out template, else IN_TEMPLATE."""
        held = any(t in cls.HELDOUT_TEMPLATES for t in cls.templates_of(key))
        return OUT_OF_TEMPLATE if held else IN_TEMPLATE

    @property
    def split(self) -> str:
        return self.split_of_key(self.key)

    @property
    def part(self) -> str:
        return self.part_of_key(self.key)

    def requests(self) -> list[ChatTaskRequest]:
        raise NotImplementedError

    def respond(self, texts: list[str]) -> None:
        raise NotImplementedError

    def outcome(self) -> OutcomeReport:
        raise NotImplementedError


def user_chat(text: str, example: tuple[str, str] | None = None) -> tuple[dict, ...]:
    """The chat for one request; `example` (a user text and the reply wanted) goes first as a worked turn: a
    135M model follows a shown format far better than a described one."""
    shown = ({"role": "user", "content": example[0]}, {"role": "assistant", "content": example[1]}) if example else ()
    return (*shown, {"role": "user", "content": text})
