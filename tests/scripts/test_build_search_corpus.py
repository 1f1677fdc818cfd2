"""scripts/build_search_corpus.py: the shipped search corpus of the chat tasks is exactly what the builder builds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_corpus_is_the_builders_output():
    spec = importlib.util.spec_from_file_location("build_search_corpus", REPO / "scripts" / "build_search_corpus.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert json.loads(builder.CORPUS_FILE.read_text()) == builder.build()
    assert builder.CORPUS_FILE == REPO / "demo" / "product" / "tasks" / "chat" / "corpus.json"
