"""Read sources of one format, build each session, publish it; count everything, never stop on bad input.

A source that cannot be read, a line or span that is not what its format says, or a session that
cannot be built is skipped with its place and reason (counted in the summary); the rest still goes
through. Only infrastructure failures (the spool is full) stop the import.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ingest.importers.build import SessionBuilder
from ingest.importers.model import BadInput, ImportedSession

# format name -> reader module (each has FORMAT, TASK_FAMILY and read(path) -> Iterator[ImportedSession | BadInput])
FORMATS = {"openai-chat": "ingest.importers.openai_chat", "swe-agent": "ingest.importers.swe_agent",
           "otlp": "ingest.importers.otlp"}


@dataclass
class ImportSummary:
    files: int = 0
    sessions: int = 0
    events: int = 0
    model_calls: int = 0
    outcomes: int = 0
    skipped: list[BadInput] = field(default_factory=list)
    opted_out: int = 0  # sessions of opted-out users (ingest.opt_out_users): dropped, never built
    forgotten: int = 0  # sessions of users or sessions `liverl forget` erased: built, never published
    redacted: Counter = field(default_factory=Counter)

    def lines(self) -> list[str]:
        reasons = Counter(bad.reason for bad in self.skipped)
        text = [f"imported {self.sessions} sessions ({self.events} events, {self.model_calls} model calls, "
                f"{self.outcomes} outcomes) from {self.files} files; skipped {len(self.skipped)}"
                + (f" ({', '.join(f'{r}: {n}' for r, n in sorted(reasons.items()))})" if reasons else "")
                + (f"; dropped {self.opted_out} sessions of opted-out users" if self.opted_out else "")
                + (f"; dropped {self.forgotten} sessions forgotten by `liverl forget`" if self.forgotten else "")]
        if self.redacted:
            text.append("redacted: " + ", ".join(f"{kind} {n}" for kind, n in sorted(self.redacted.items())))
        return text


def import_files(fmt: str, paths: Iterable[Path], builder: SessionBuilder,
                 publish: Callable[[ImportedSession, object], bool] | None,
                 say: Callable[[str], None] = print, task_family: str | None = None,
                 user_id: str = "", opted_out: Callable[[str], bool] = lambda user: False) -> ImportSummary:
    """Import every session of `paths`; publish(session, built) sends one built session and says whether it
    did (False: its user or it was forgotten, counted apart; None instead of publish: a dry run).
    user_id: the end user of sessions whose source names none; opted_out(user): drop that user's sessions
    (counted) before anything of them is built."""
    reader = importlib.import_module(FORMATS[fmt])
    summary = ImportSummary()
    for path in paths:
        summary.files += 1
        for found in _read(reader, path):
            if isinstance(found, BadInput):
                _skip(summary, found, say)
                continue
            if task_family:
                found.task_family = task_family
            found.user_id = found.user_id or user_id
            if opted_out(found.user_id):
                summary.opted_out += 1
                continue
            try:
                built = builder.build(found)
                published = publish is None or publish(found, built)
            except (ValueError, TypeError, KeyError) as error:  # one session's content, never the import
                _skip(summary, BadInput(found.source, "unbuildable_session", f"{type(error).__name__}: {error}"), say)
                continue
            if not published:
                summary.forgotten += 1
                continue
            summary.sessions += 1
            summary.events += len(built.events)
            summary.model_calls += len(built.calls)
            summary.outcomes += sum(e.HasField("outcome") for e in built.events)
            summary.redacted += built.redacted
    return summary


def _read(reader, path: Path):
    if not path.is_file():
        yield BadInput(str(path), "not_a_file", "no such file (or a folder): pass the trace files themselves")
        return
    try:
        yield from reader.read(path)
    except (OSError, UnicodeDecodeError) as error:
        yield BadInput(str(path), "unreadable", f"{type(error).__name__}: {error}")


def _skip(summary: ImportSummary, bad: BadInput, say: Callable[[str], None]) -> None:
    summary.skipped.append(bad)
    say(f"skipped {bad}")
