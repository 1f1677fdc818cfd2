"""Replace a generated block of a page (README.md, docs/capacity.md): the lines between two markers."""

from __future__ import annotations

from pathlib import Path


def replace_block(page: Path, begin: str, end: str, block: str) -> None:
    """Put `block` (which starts with `begin` and ends with `end`) where the page's block is; SystemExit, saying
    what to add, when the page has none."""
    text = page.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{page} has no generated block; put the lines {begin!r} and {end!r} where it goes")
    head, rest = text.split(begin, 1)
    page.write_text(head + block + rest.split(end, 1)[1])
