"""Find a forgotten subject's bytes anywhere under a folder, in any encoding a store may have used.

Each file is searched raw; as base64 (at each of the three alignments) and hex; inside every gzip, zlib, zstd
and framed-snappy stream found by its magic bytes; and, for Parquet files, in every column's values (which
also sees through Parquet's own page compression and encodings). Token ids are searched as a run of
integers: protobuf packed varints, little-endian int32 and int64 arrays, and Parquet list columns.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

GZIP_MAGIC, ZSTD_MAGIC, SNAPPY_FRAMED_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\xff\x06\x00\x00sNaPpY"
ZLIB_HEADERS = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")
MAX_STREAMS_PER_FILE = 256  # magic bytes also occur by chance: bound the tries, not the search


@dataclass(frozen=True)
class Found:
    path: str
    needle: str
    how: str  # "raw", "base64", "hex", "gzip", "zlib", "zstd", "snappy", "parquet:<column>", "tokens:<encoding>"


def scan(root: Path, texts: Iterable[str], token_runs: Iterable[list[int]] = ()) -> list[Found]:
    """Every place under root that holds one of texts or one of the token id runs."""
    texts, token_runs = [t for t in texts if t], [list(r) for r in token_runs if r]
    patterns = {text: _encodings(text.encode()) for text in texts}
    runs = {str(run): _token_encodings(run) for run in token_runs}
    found: list[Found] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        name = str(path.relative_to(root))
        for how, blob in [("raw", data), *_decompressed(data)]:
            for needle, encodings in {**patterns, **runs}.items():
                for encoding, pattern in encodings:
                    if pattern in blob:
                        found.append(Found(name, needle, how if encoding == "raw" else f"{how}/{encoding}"))
        if path.suffix == ".parquet" or data[:4] == b"PAR1":
            found += _parquet(path, name, texts, token_runs)
    return found


def _encodings(needle: bytes) -> list[tuple[str, bytes]]:
    out = [("raw", needle), ("hex", binascii.hexlify(needle)), ("HEX", binascii.hexlify(needle).upper())]
    for shift in range(3):  # base64 of the needle at each alignment, without the edge characters it shares
        encoded = base64.b64encode(b"\0" * shift + needle)
        core = encoded[4 if shift else 0:len(encoded) - 4]  # the groups the needle's bytes alone decide
        if len(core) >= 8:
            out += [("base64", core), ("base64url", core.replace(b"+", b"-").replace(b"/", b"_"))]
    return out


def _token_encodings(run: list[int]) -> list[tuple[str, bytes]]:
    return [("tokens:varint", b"".join(_varint(t) for t in run)),
            ("tokens:int32", struct.pack(f"<{len(run)}i", *run)), ("tokens:int64", struct.pack(f"<{len(run)}q", *run))]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _decompressed(data: bytes) -> list[tuple[str, bytes]]:
    """Every stream in data that decompresses, named by its format."""
    import zstandard

    out = []
    for how, magics, inflate in (("gzip", (GZIP_MAGIC,), _gunzip), ("zlib", ZLIB_HEADERS, _inflate),
                                 ("zstd", (ZSTD_MAGIC,), lambda b: zstandard.ZstdDecompressor().decompressobj()
                                  .decompress(b)),
                                 ("snappy", (SNAPPY_FRAMED_MAGIC,), _unsnappy_framed)):
        for magic in magics:
            start, tries = data.find(magic), 0
            while start >= 0 and tries < MAX_STREAMS_PER_FILE:
                tries += 1
                try:
                    plain = inflate(data[start:])
                    if plain:
                        out.append((how, plain))
                except Exception:  # noqa: BLE001 - magic bytes by chance: not a stream
                    pass
                start = data.find(magic, start + 1)
    return out


def _gunzip(data: bytes) -> bytes:
    return gzip.GzipFile(fileobj=__import__("io").BytesIO(data)).read()


def _inflate(data: bytes) -> bytes:
    return zlib.decompressobj().decompress(data)


def _unsnappy_framed(data: bytes) -> bytes:
    """The framed snappy format: chunks of (type, 3-byte length, body); 0x00 compressed, 0x01 stored."""
    import pyarrow as pa

    out, at = bytearray(), len(SNAPPY_FRAMED_MAGIC)
    while at + 4 <= len(data):
        kind, length = data[at], int.from_bytes(data[at + 1:at + 4], "little")
        body = data[at + 4 + 4:at + 4 + length]  # after the 4-byte checksum
        if kind == 0x00:
            size, shift, i = 0, 0, 0
            while True:  # the raw block's uncompressed length: a varint
                size |= (body[i] & 0x7F) << shift
                shift, i = shift + 7, i + 1
                if not body[i - 1] & 0x80:
                    break
            out += pa.Codec("snappy").decompress(body, decompressed_size=size).to_pybytes()
        elif kind == 0x01:
            out += body
        elif kind != 0xFF and kind < 0x80:
            break
        at += 4 + length
    return bytes(out)


def _parquet(path: Path, name: str, texts: list[str], token_runs: list[list[int]]) -> list[Found]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception:  # noqa: BLE001 - not a readable Parquet file after all
        return []
    found = []
    for column in table.column_names:
        values = table.column(column).to_pylist()
        flat = repr(values)
        found += [Found(name, text, f"parquet:{column}") for text in texts if text in flat]
        for run in token_runs:
            if any(isinstance(v, list) and _holds_run(v, run) for v in values):
                found.append(Found(name, str(run), f"parquet:{column}"))
    return found


def _holds_run(values: list, run: list[int]) -> bool:
    return any(values[i:i + len(run)] == run for i in range(len(values) - len(run) + 1))
