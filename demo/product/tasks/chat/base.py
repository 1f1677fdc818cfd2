"""What a real-model task offers its runner: chat requests out, completion texts in, a verifiable outcome.

A task is a small state machine. `requests()` lists the chats to complete now (the trained policy's, or a
frozen sub-agent's); `respond(texts)` takes their completions in the same order and advances the task; when
`done`, `outcome()` is the verifiable result (demo.product.tasks.base.OutcomeReport, as the toy tasks report
it). Runners batch the requests of many tasks into one engine call (demo/evaluate/heldout_success.py).

Held out versus training: every task has a `key` naming its content (family, template and parameters, or
question ids); `split_of(key)` puts a fixed quarter of the key space in the held-out split. The training
generator draws only training keys and the held-out generator only held-out keys, so the two never share a
task whatever their seeds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from demo.product.policy import ROLE_SINGLE
from demo.product.tasks.base import OutcomeReport

HELDOUT = "heldout"
TRAINING = "training"
HELDOUT_SHARE = 4  # one key in HELDOUT_SHARE is held out


def split_of(key: str) -> str:
    """The split a task key belongs to, fixed by its hash (independent of any seed)."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HELDOUT_SHARE
    return HELDOUT if bucket == 0 else TRAINING


@dataclass(frozen=True)
class ChatTaskRequest:
    """One completion a task needs now."""

    messages: tuple[dict, ...]  # chat messages [{"role": ..., "content": ...}], rendered by the model's template
    max_tokens: int
    role: str = ROLE_SINGLE  # ROLE_SINGLE / ROLE_ORCHESTRATOR: the trained policy; ROLE_SUBAGENT: a frozen copy


class ChatTask:
    family: str = ""
    agent_role: str = ROLE_SINGLE

    def __init__(self, task_id: str, key: str) -> None:
        self.task_id = task_id
        self.key = key
        self.done = False
        self.transcript: list[tuple[str, str]] = []  # (role, completion) in order, for reports and training

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
