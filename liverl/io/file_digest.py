"""sha256 of files, read in 1 MiB chunks (weights files run to gigabytes): one file, or several in a given order.
The digests liverl records (a version's files digest, a base policy's weights digest, a converted package's
checksums) are all built from these."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

CHUNK_BYTES = 1 << 20


def file_sha256(path: Path) -> str:
    """The hex sha256 of one file's content."""
    return files_sha256([path])


def files_sha256(paths: Iterable[Path]) -> str:
    """The hex sha256 of the files' contents one after the other, in the order given."""
    sha = hashlib.sha256()
    for path in paths:
        with Path(path).open("rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                sha.update(chunk)
    return sha.hexdigest()
