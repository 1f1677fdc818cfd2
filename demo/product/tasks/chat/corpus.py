"""The search corpus shipped with the demo (corpus.json), the kind of each fact, and a small lexical retriever."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CORPUS_FILE = Path(__file__).with_name("corpus.json")
STOPWORDS = frozenset("a an the of in is was by what who where which how does do did every year held town company "
                      "make makes and or to for on at it be are".split())
WORD = re.compile(r"[a-z0-9]+")
# The six kinds of fact (60 each), told apart by their question: the search and orchestrator families' templates.
FACT_KINDS = {"founded": "town", "designed": "bridge", "high": "mountain", "born": "person", "make": "company",
              "festival": "festival"}


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    question: str  # the question this document answers
    answer: str  # the answer's short form, which a reply must contain


@lru_cache(maxsize=1)
def load_corpus() -> tuple[Document, ...]:
    return tuple(Document(**doc) for doc in json.loads(CORPUS_FILE.read_text()))


def kind_of(doc: Document) -> str:
    """The kind of fact a document holds (its question's template)."""
    words = set(WORD.findall(doc.question.lower()))
    kinds = [kind for word, kind in FACT_KINDS.items() if word in words]
    if len(kinds) != 1:
        raise ValueError(f"document {doc.id}: its question {doc.question!r} names {len(kinds)} fact kinds, not one")
    return kinds[0]


@lru_cache(maxsize=1)
def documents_by_id() -> dict[str, Document]:
    return {doc.id: doc for doc in load_corpus()}


def terms(text: str) -> list[str]:
    return [word for word in WORD.findall(text.lower()) if word not in STOPWORDS]


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, Counter], dict[str, float]]:
    docs = load_corpus()
    counts = {doc.id: Counter(terms(doc.text)) for doc in docs}
    frequency = Counter(term for counter in counts.values() for term in counter)
    idf = {term: math.log(1 + len(docs) / n) for term, n in frequency.items()}
    return counts, idf


def search(query: str, k: int) -> list[Document]:
    """The k documents sharing the most (idf-weighted) terms with the query, best first; ties by id."""
    counts, idf = _index()
    wanted = set(terms(query))
    scored = [(sum(idf[t] for t in wanted if t in counter), doc_id) for doc_id, counter in counts.items()]
    ranked = sorted(scored, key=lambda pair: (-pair[0], pair[1]))
    by_id = documents_by_id()
    return [by_id[doc_id] for score, doc_id in ranked[:k] if score > 0]


def mentions(reply: str, answer: str) -> bool:
    """True when the reply contains the answer's words in order (case and punctuation ignored)."""
    return " ".join(WORD.findall(answer.lower())) in " ".join(WORD.findall(reply.lower()))
