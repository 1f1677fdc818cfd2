"""The format-neutral shape every importer reads its traces into, before redaction and tokenization.

A reader (openai_chat, swe_agent, otlp) turns its source into `ImportedSession`s whose items are in
the order they happened: `Exchange`s (one model call: the messages the model saw and what it answered)
and `ToolExecution`s (a tool run the source recorded on its own, e.g. an OTLP execute_tool span).
Messages use the OpenAI chat shape ({"role", "content", "tool_calls", "tool_call_id"}), the one most
sources already speak. `build.py` turns a session into SessionEvents and ModelCalls.

Ids are deterministic: every item carries `source_id`, a digest of where it came from (file content
and position, a log line, a span id), so importing the same source twice yields the same event ids
and the pipelines' per-tenant dedupe drops the second copy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

OBSERVATION_OF = "liverl_observation_of"  # message key: this user-role message is the output of that tool call


def digest(*parts: str | bytes) -> str:
    """A stable hex id of the parts (sha256, 32 hex characters)."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass"))
        hasher.update(b"\x00")
    return hasher.hexdigest()[:32]


@dataclass
class ToolCallSpec:
    call_id: str
    name: str
    arguments_json: str
    valid: bool = True  # False: the source's call did not parse; imported as a broken call, never dropped
    error: str = ""


@dataclass
class Exchange:
    """One model call as the source logged it."""

    source_id: str
    messages: list[dict]  # the context the model saw, OpenAI chat shape
    completion: str  # the answer's text (tool calls are separate)
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    calls_in_text: bool = False  # the calls are written inside `completion` already (no function calling)
    tools: list[dict] | None = None  # the tool definitions offered, when the source logged them
    model: str = ""
    time_ms: int = 0  # request time, 0: unknown
    finish_ms: int = 0
    finish_reason: str = "stop"
    sampling: dict = field(default_factory=dict)  # temperature, top_p, top_k, max_tokens, seed, stop


@dataclass
class ToolExecution:
    """A tool run recorded on its own (not only as a tool message in a later prompt)."""

    source_id: str
    call: ToolCallSpec
    output: str
    is_error: bool = False
    time_ms: int = 0


@dataclass
class SourceOutcome:
    success: bool
    score: float
    detail: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ImportedSession:
    source: str  # for messages: "file.traj", "log.jsonl:12"
    identity: str  # digest naming the session's own events (start, end, outcome)
    session_id: str
    task_family: str
    task_id: str = ""
    start_ms: int = 0  # 0: unknown; the builder then uses the import's fallback time
    items: list[Exchange | ToolExecution] = field(default_factory=list)
    trailing: list[dict] = field(default_factory=list)  # messages after the last exchange (a final observation)
    outcome: SourceOutcome | None = None
    end_reason: str = "completed"  # "" : the source may continue (no session_end is written)
    attributes: dict[str, str] = field(default_factory=dict)
    user_id: str = ""  # the end user the source names ("" none): ingest.opt_out_users is checked against it


class TooManyEvents(Exception):
    """One request would become more events than allowed (not a ValueError: never one bad span's fault)."""

    def __init__(self, count: int, limit: int, what: str = "events"):
        super().__init__(f"{count} {what}, over the limit of {limit} events per request")
        self.count = count
        self.limit = limit


@dataclass
class BadInput:
    """A part of a source that could not be read: counted, reported with its place, never fatal."""

    source: str  # "file" or "file:line"
    reason: str  # short and machine-readable, e.g. "invalid_json", "no_messages"
    message: str  # what was wrong and what to do

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}: {self.message}"
