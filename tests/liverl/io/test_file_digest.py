"""sha256 of files in chunks: equal to hashing the whole content at once, in the order given; and the one copy of
the chunked read (the digests of signing, base weights and package checksums all use it)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from liverl.io.file_digest import CHUNK_BYTES, file_sha256, files_sha256

ROOT = Path(__file__).resolve().parents[3]


def test_a_file_larger_than_a_chunk_hashes_like_its_whole_content(tmp_path):
    content = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 3)  # two chunks and a partial third
    path = tmp_path / "weights.bin"
    path.write_bytes(content)
    assert file_sha256(path) == hashlib.sha256(content).hexdigest()


def test_several_files_hash_as_their_contents_in_the_given_order(tmp_path):
    (tmp_path / "a").write_bytes(b"first")
    (tmp_path / "b").write_bytes(b"second")
    assert files_sha256([tmp_path / "a", tmp_path / "b"]) == hashlib.sha256(b"firstsecond").hexdigest()
    assert files_sha256([tmp_path / "b", tmp_path / "a"]) != files_sha256([tmp_path / "a", tmp_path / "b"])
    assert files_sha256([]) == hashlib.sha256().hexdigest()


def test_no_other_module_hashes_files_chunk_by_chunk():
    chunked_read = re.compile(r"iter\(lambda: \w+\.read\(")
    copies = [str(path.relative_to(ROOT)) for folder in ("liverl", "ingest", "serving", "pipelines", "trainer")
              for path in sorted((ROOT / folder).rglob("*.py"))
              if "hashlib" in (text := path.read_text(encoding="utf-8")) and chunked_read.search(text)]
    assert copies == ["liverl/io/file_digest.py"], f"use liverl/io/file_digest.py instead of a copy in {copies}"
