"""Importer fixtures: a word-level tokenizer that knows every word of the sources, and `liverl import` runs."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
from collections.abc import Iterable
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "real-agent-traces"
TRAJ_FILES = ["function_calling_simple.traj", "marshmallow-1867.function_calling.traj", "ctf-networking_1.traj"]


@pytest.fixture(scope="session")
def traj_paths() -> list[Path]:
    if not TRACES.is_dir():
        pytest.skip(f"the real SWE-agent traces are not at {TRACES}")
    return [TRACES / name for name in TRAJ_FILES]


def source_words(fmt: str, paths: Iterable[Path]) -> set[str]:
    """Every whitespace-separated word the importer can render from these sources, raw and redacted, so a
    word-level tokenizer over them decodes the token ids back to the text."""
    from ingest.importers.chat import completion_text, render_prompt
    from ingest.importers.importer import FORMATS
    from ingest.importers.model import Exchange, ImportedSession
    from liverl.contracts.chat import content_text
    from liverl.redaction import Redactor

    redactor = Redactor()
    reader = importlib.import_module(FORMATS[fmt])
    texts: list[str] = []
    for path in paths:
        for session in reader.read(path):
            if not isinstance(session, ImportedSession):
                continue
            for item in session.items:
                if isinstance(item, Exchange):
                    texts.append(render_prompt(None, item.messages, item.tools))
                    texts.append(completion_text(item.completion, item.tool_calls))
                    texts += [content_text(m.get("content")) for m in item.messages]
    return {word for text in texts for variant in (text, redactor.redact_text(text)) for word in variant.split()}


def make_tokenizer_dir(folder: Path, words: Iterable[str]) -> Path:
    from demo.policy.tiny_policy import build_tokenizer

    build_tokenizer(sorted(words)).save_pretrained(folder)
    return folder


def run_import(config, argv: list[str]) -> tuple[int, str]:
    """`liverl import ARGV` through the command's own parser and run(); returns (exit code, stdout)."""
    from ingest import import_cli

    parser = argparse.ArgumentParser()
    import_cli.add_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = import_cli.run(config, parser.parse_args(argv))
    return code, out.getvalue()


def messages_of(records, message_type) -> list:
    return [message_type.FromString(r.value) for r in records]
