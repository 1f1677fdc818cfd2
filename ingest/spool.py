"""A durable FIFO of byte records on local disk: what is appended survives a crash and drains in order.

Used twice: by the capture service (events it acknowledged while Kafka was unreachable) and by the
SDK (events the capture service could not take). Layout in the folder:

    00000000000000000001.seg   frames: [u32 length][u32 crc32][payload], appended and fsync'd
    cursor.json                {"segment": n, "offset": bytes} of the first record not yet delivered

A frame is acknowledged only after fsync, so a torn frame at the tail (crash mid-append) was never
acknowledged: it is cut off when the spool is opened again.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

FRAME_HEADER = struct.Struct(">II")  # payload length, crc32 of payload
SEGMENT_SUFFIX = ".seg"


class SpoolFull(Exception):
    """The spool reached its size limit: the caller must not acknowledge what it could not append."""


@dataclass(frozen=True, order=True)
class Position:
    """Where the next undelivered record starts."""

    segment: int
    offset: int


class Spool:
    """Append-only segments plus a committed read cursor; thread-safe."""

    def __init__(self, folder: Path, max_bytes: int = 1 << 30, segment_bytes: int = 64 << 20, fsync: bool = True):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock = threading.Lock()
        self._cursor = self._load_cursor()
        self._segments = self._scan_segments()
        self._truncate_torn_tail()
        self._size = sum(self._segment_path(n).stat().st_size for n in self._segments)
        self._count = self._count_pending()
        self._writer = None

    # --- writing -----------------------------------------------------------------------------

    def append(self, payloads: list[bytes]) -> None:
        """Append records durably (fsync before returning); raises SpoolFull past max_bytes."""
        if not payloads:
            return
        blob = b"".join(FRAME_HEADER.pack(len(p), zlib.crc32(p)) + p for p in payloads)
        with self._lock:
            if self._size + len(blob) > self.max_bytes:
                raise SpoolFull(f"spool {self.folder} holds {self._size} bytes (limit {self.max_bytes}); "
                                "raise the limit or restore the downstream")
            writer = self._active_writer(len(blob))
            writer.write(blob)
            writer.flush()
            if self.fsync:
                os.fsync(writer.fileno())
            self._size += len(blob)
            self._count += len(payloads)

    def _active_writer(self, incoming: int):
        last = self._segments[-1] if self._segments else None
        last_size = self._segment_path(last).stat().st_size if last is not None else 0
        if last is None or (last_size > 0 and last_size + incoming > self.segment_bytes):
            self._close_writer()
            number = last + 1 if last is not None else max(self._cursor.segment, 1)
            self._segments.append(number)
            self._writer = self._segment_path(number).open("ab")
            if self.fsync:
                _fsync_dir(self.folder)
        elif self._writer is None:
            self._writer = self._segment_path(last).open("ab")
        return self._writer

    # --- reading and committing --------------------------------------------------------------

    def read(self, max_records: int, max_bytes: int = 1 << 62) -> tuple[list[bytes], Position]:
        """Up to max_records (and about max_bytes; always at least one) from the cursor on, and the
        position just after them: commit it once they are delivered."""
        out: list[bytes] = []
        size = 0
        with self._lock:
            position = self._start_position()
            for number in [n for n in self._segments if n >= position.segment]:
                offset = position.offset if number == position.segment else 0
                with self._segment_path(number).open("rb") as handle:
                    handle.seek(offset)
                    while len(out) < max_records and (not out or size < max_bytes):
                        frame = _read_frame(handle)
                        if frame is None or (out and size + len(frame) > max_bytes):
                            break
                        out.append(frame)
                        size += len(frame)
                        offset = handle.tell()
                position = Position(number, offset)
                if len(out) >= max_records or (out and size >= max_bytes):
                    break
        return out, position

    def commit(self, position: Position, delivered: int) -> None:
        """Record that everything before position is delivered; delete segments left wholly behind."""
        with self._lock:
            self._cursor = position
            self._count = max(0, self._count - delivered)
            done = [n for n in self._segments if n < position.segment]
            if self._is_at_end():
                done = list(self._segments)  # everything delivered: start afresh
                self._cursor = Position((self._segments[-1] if self._segments else position.segment), 0)
            self._write_cursor()
            for number in done:
                if self._writer is not None and number == self._segments[-1]:
                    self._close_writer()
                self._segment_path(number).unlink(missing_ok=True)
                self._segments.remove(number)
            self._size = sum(self._segment_path(n).stat().st_size for n in self._segments)

    def empty(self) -> bool:
        with self._lock:
            return self._is_at_end()

    def pending(self) -> int:
        """Records appended and not yet committed."""
        with self._lock:
            return self._count

    def size_bytes(self) -> int:
        with self._lock:
            return self._size

    def close(self) -> None:
        with self._lock:
            self._close_writer()

    # --- internals ---------------------------------------------------------------------------

    def _start_position(self) -> Position:
        if self._segments and self._cursor.segment < self._segments[0]:
            return Position(self._segments[0], 0)
        return self._cursor

    def _is_at_end(self) -> bool:
        if not self._segments:
            return True
        start = self._start_position()
        last = self._segments[-1]
        return start.segment == last and start.offset >= self._segment_path(last).stat().st_size

    def _segment_path(self, number: int) -> Path:
        return self.folder / f"{number:020d}{SEGMENT_SUFFIX}"

    def _scan_segments(self) -> list[int]:
        numbers = sorted(int(p.stem) for p in self.folder.glob(f"*{SEGMENT_SUFFIX}") if p.stem.isdigit())
        return [n for n in numbers if n >= self._cursor.segment]

    def _load_cursor(self) -> Position:
        path = self.folder / "cursor.json"
        if not path.exists():
            return Position(1, 0)
        data = json.loads(path.read_text())
        return Position(int(data["segment"]), int(data["offset"]))

    def _write_cursor(self) -> None:
        path = self.folder / "cursor.json"
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as handle:
            json.dump({"segment": self._cursor.segment, "offset": self._cursor.offset}, handle)
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if self.fsync:
            _fsync_dir(self.folder)

    def _truncate_torn_tail(self) -> None:
        """Cut the last segment after its last whole, checksummed frame (a crash mid-append)."""
        for number in self._segments:
            path = self._segment_path(number)
            good = 0
            with path.open("rb") as handle:
                while _read_frame(handle) is not None:
                    good = handle.tell()
            if good < path.stat().st_size:
                with path.open("r+b") as handle:
                    handle.truncate(good)

    def _count_pending(self) -> int:
        count = 0
        position = self._start_position()
        for number in self._segments:
            with self._segment_path(number).open("rb") as handle:
                if number == position.segment:
                    handle.seek(position.offset)
                while _read_frame(handle) is not None:
                    count += 1
        return count

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _read_frame(handle) -> bytes | None:
    """The next whole frame, or None at the end or at a torn / corrupt frame."""
    header = handle.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None
    length, crc = FRAME_HEADER.unpack(header)
    payload = handle.read(length)
    if len(payload) < length or zlib.crc32(payload) != crc:
        return None
    return payload


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
