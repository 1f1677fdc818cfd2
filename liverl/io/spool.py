"""A durable FIFO of byte records on local disk: what is appended survives a crash and drains in order.

Every stage that must not lose what Kafka could not take uses this one spool (the capture service, the
capture SDK, the policy server's recorder). Layout in the folder:

    00000000000000000001.seg   frames: [magic "LVS1"][u32 length][u32 crc32c(length, payload)][payload]
    cursor.json                {"segment": n, "offset": bytes} of the first record not yet delivered
    quarantine/                the bytes of every corrupt frame, one file per region: <segment>-<offset>.bad

Durability: with `Durability.FSYNC` (the default) `append` returns only after fsync, so a caller may
acknowledge its client as soon as `append` returned. A torn frame at the tail (a crash mid-append) was
therefore never acknowledged.

Corruption never blocks the spool: a frame with a bad magic, an impossible length or a bad checksum is
copied to quarantine/, logged as one JSON line, counted in `stats()` and reported to `on_corrupt`; reading
then resyncs at the next offset where a whole, checksummed frame starts, so every record after it is
still delivered. A corrupt region at the end of the last segment (a torn tail) is cut off after it was
quarantined, so appending continues behind the last whole frame.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

log = logging.getLogger("liverl.io.spool")

MAGIC = b"LVS1"
FRAME_HEADER = struct.Struct(">4sII")  # magic, payload length, crc32c over (length, payload)
LENGTH = struct.Struct(">I")
MAX_RECORD_BYTES = 256 << 20  # a longer length field can only be corruption
SEGMENT_SUFFIX = ".seg"
QUARANTINE_DIR = "quarantine"


class SpoolFull(Exception):
    """The spool reached its size limit: the caller must not acknowledge what it could not append."""


class Durability(enum.Enum):
    """When `append` returns, relative to the disk."""

    FSYNC = "fsync"
    """Segment (and, on a new segment, the folder) fsync'd before append returns: survives a power loss."""
    OS_BUFFERED = "os-buffered"
    """Written to the OS page cache only: survives a process crash, not a power loss. For tests/benches."""


@dataclass(frozen=True, order=True)
class Position:
    """Where the next undelivered record starts."""

    segment: int
    offset: int


@dataclass(frozen=True)
class CorruptFrame:
    """One quarantined region: what `on_corrupt` receives."""

    segment: int
    offset: int
    length: int
    reason: str  # bad-magic, impossible-length, bad-checksum, torn-header
    quarantine_path: Path


@dataclass(frozen=True)
class SpoolStats:
    """Counters of one open spool (since it was opened), for a stage's metrics."""

    pending: int
    size_bytes: int
    segments: int
    corrupt_frames: int
    quarantined_bytes: int


class Spool:
    """Append-only segments plus a committed read cursor; thread-safe."""

    def __init__(self, folder: Path, max_bytes: int = 1 << 30, segment_bytes: int = 64 << 20,
                 durability: Durability = Durability.FSYNC,
                 on_corrupt: Callable[[CorruptFrame], None] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.folder, 0o700)  # records hold what users sent: readable by this service's user alone
        for path in self.folder.rglob("*"):  # a spool written by an older version, with the umask's modes
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.durability = durability
        self.on_corrupt = on_corrupt
        """Called (under the spool's lock: keep it quick) for each newly quarantined region. Regions found
        while opening happen before a caller can set this: they are in stats()."""
        self._lock = threading.RLock()
        self._corrupt_frames = 0
        self._quarantined_bytes = 0
        self._writer: BinaryIO | None = None
        self._cursor = self._load_cursor()
        self._segments = self._scan_segments()
        self._count = self._open_scan()
        self._size = self._segments_size()

    # --- writing -----------------------------------------------------------------------------

    def append(self, payloads: list[bytes]) -> None:
        """Append records durably (per `durability`) and in order; raises SpoolFull past max_bytes."""
        if not payloads:
            return
        too_long = [len(p) for p in payloads if len(p) > MAX_RECORD_BYTES]
        if too_long:
            raise ValueError(f"a spool record holds at most {MAX_RECORD_BYTES} bytes, got {too_long[0]}: "
                             "split it before spooling")
        blob = b"".join(encode_frame(p) for p in payloads)
        with self._lock:
            if self._size + len(blob) > self.max_bytes:
                raise SpoolFull(f"spool {self.folder} holds {self._size} bytes (limit {self.max_bytes}); "
                                "raise the limit or restore the downstream")
            writer = self._active_writer(len(blob))
            writer.write(blob)
            writer.flush()
            if self.durability is Durability.FSYNC:
                os.fsync(writer.fileno())
            self._size += len(blob)
            self._count += len(payloads)

    def _active_writer(self, incoming: int) -> BinaryIO:
        last = self._segments[-1] if self._segments else None
        last_size = self._segment_path(last).stat().st_size if last is not None else 0
        if last is None or (last_size > 0 and last_size + incoming > self.segment_bytes):
            self._close_writer()
            # numbers are never reused, so a quarantine file always names the segment it came from
            number = last + 1 if last is not None else max(self._cursor.segment, 1)
            self._segments.append(number)
            self._writer = open(self._segment_path(number), "ab", opener=_owner_only)
            if self.durability is Durability.FSYNC:
                _fsync_dir(self.folder)
        elif self._writer is None:
            self._writer = open(self._segment_path(last), "ab", opener=_owner_only)
        return self._writer

    # --- reading and committing --------------------------------------------------------------

    def read(self, max_records: int, max_bytes: int = 1 << 62) -> tuple[list[bytes], Position]:
        """Up to max_records (and about max_bytes; always at least one) from the cursor on, and the
        position just after them: commit it once they are delivered. Corrupt frames on the way are
        quarantined and skipped."""
        out: list[bytes] = []
        size = 0
        with self._lock:
            position = self._start_position()
            skipped_to: Position | None = None
            for number in [n for n in self._segments if n >= position.segment]:
                offset = position.offset if number == position.segment else 0
                full = False
                with self._segment_path(number).open("rb") as handle:
                    for payload, end in self._frames(number, handle, offset, new_corruption_pending=True):
                        if payload is None:  # a quarantined region: nothing in it to deliver
                            offset = end
                            if not out:
                                skipped_to = Position(number, end)
                            continue
                        if len(out) >= max_records or (out and size + len(payload) > max_bytes):
                            full = True
                            break
                        out.append(payload)
                        size += len(payload)
                        offset = end
                position = Position(number, offset)
                if full or len(out) >= max_records or (out and size >= max_bytes):
                    break
            if skipped_to is not None:  # nothing before the corrupt region waits: move the cursor past it
                self._advance(skipped_to)
        return out, position

    def commit(self, position: Position, delivered: int) -> None:
        """Record that everything before position is delivered; delete segments left wholly behind."""
        with self._lock:
            self._count = max(0, self._count - delivered)
            self._advance(position)

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

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(pending=self._count, size_bytes=self._size, segments=len(self._segments),
                              corrupt_frames=self._corrupt_frames, quarantined_bytes=self._quarantined_bytes)

    def close(self) -> None:
        with self._lock:
            self._close_writer()

    # --- frames and corruption ---------------------------------------------------------------

    def _frames(self, number: int, handle: BinaryIO, offset: int,
                new_corruption_pending: bool) -> Iterator[tuple[bytes | None, int]]:
        """(payload, end offset) per whole frame of a segment from offset on; (None, end) per corrupt region,
        quarantined on the way. new_corruption_pending: the region's frames were counted as pending."""
        size = os.fstat(handle.fileno()).st_size
        while offset < size:
            handle.seek(offset)
            payload, reason = _read_frame(handle, size - offset)
            if payload is not None:
                offset += FRAME_HEADER.size + len(payload)
                yield payload, offset
                continue
            resume = _next_frame_start(handle, offset + 1, size)
            if self._quarantine(number, handle, offset, resume, reason) and new_corruption_pending:
                self._count = max(0, self._count - 1)  # at least one counted record was in there
            offset = resume
            yield None, offset

    def _quarantine(self, number: int, handle: BinaryIO, start: int, end: int, reason: str) -> bool:
        """Copy [start, end) of a segment to quarantine/; True when this region was not quarantined before."""
        folder = self.folder / QUARANTINE_DIR
        path = folder / f"{number:020d}-{start:020d}.bad"
        if path.exists():  # seen by an earlier read or an earlier run: already copied and counted
            return False
        folder.mkdir(exist_ok=True, mode=0o700)
        handle.seek(start)
        data = handle.read(end - start)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb", opener=_owner_only) as sink:
            sink.write(data)
            sink.flush()
            if self.durability is Durability.FSYNC:
                os.fsync(sink.fileno())
        os.replace(tmp, path)
        self._corrupt_frames += 1
        self._quarantined_bytes += len(data)
        log.warning(json.dumps({"msg": "spool frame quarantined", "spool": str(self.folder), "segment": number,
                                "offset": start, "bytes": len(data), "reason": reason, "quarantine": str(path)}))
        if self.on_corrupt is not None:
            self.on_corrupt(CorruptFrame(number, start, len(data), reason, path))
        return True

    def _open_scan(self) -> int:
        """Count the pending frames, quarantining corrupt ones; cut a corrupt tail off the last segment."""
        count = 0
        position = self._start_position()
        for number in self._segments:
            offset = position.offset if number == position.segment else 0
            tail_from: int | None = None
            with self._segment_path(number).open("rb") as handle:
                for payload, end in self._frames(number, handle, offset, new_corruption_pending=False):
                    if payload is None:
                        tail_from = offset if tail_from is None else tail_from
                    else:
                        count += 1
                        tail_from = None
                    offset = end
            if tail_from is not None and number == self._segments[-1]:
                with self._segment_path(number).open("r+b") as handle:
                    handle.truncate(tail_from)  # a torn append: quarantined above, never acknowledged
        return count

    # --- cursor and segments -----------------------------------------------------------------

    def _advance(self, position: Position) -> None:
        """Move the cursor to position (durably) and delete the segments wholly behind it."""
        self._cursor = position
        done = [n for n in self._segments if n < position.segment]
        if self._is_at_end():
            done = list(self._segments)  # everything delivered: start afresh in a new segment
            self._cursor = Position((self._segments[-1] + 1 if self._segments else position.segment), 0)
            self._count = 0
        self._write_cursor()
        for number in done:
            if self._writer is not None and number == self._segments[-1]:
                self._close_writer()
            self._segment_path(number).unlink(missing_ok=True)
            self._segments.remove(number)
        self._size = self._segments_size()

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

    def _segments_size(self) -> int:
        return sum(self._segment_path(n).stat().st_size for n in self._segments)

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
        with open(tmp, "w", opener=_owner_only) as handle:
            json.dump({"segment": self._cursor.segment, "offset": self._cursor.offset}, handle)
            handle.flush()
            if self.durability is Durability.FSYNC:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if self.durability is Durability.FSYNC:
            _fsync_dir(self.folder)

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def encode_frame(payload: bytes) -> bytes:
    """One record as it lies in a segment."""
    length = LENGTH.pack(len(payload))
    return FRAME_HEADER.pack(MAGIC, len(payload), crc32c.crc32c(payload, crc32c.crc32c(length))) + payload


def _read_frame(handle: BinaryIO, available: int) -> tuple[bytes | None, str]:
    """The whole frame at the handle's position (at most `available` bytes), or None and why not."""
    if available < FRAME_HEADER.size:
        return None, "torn-header"
    magic, length, crc = FRAME_HEADER.unpack(handle.read(FRAME_HEADER.size))
    if magic != MAGIC:
        return None, "bad-magic"
    if length > MAX_RECORD_BYTES or FRAME_HEADER.size + length > available:
        return None, "impossible-length"
    payload = handle.read(length)
    if crc32c.crc32c(payload, crc32c.crc32c(LENGTH.pack(length))) != crc:
        return None, "bad-checksum"
    return payload, ""


def _next_frame_start(handle: BinaryIO, start: int, size: int) -> int:
    """The first offset >= start where a whole, checksummed frame begins; size when there is none."""
    handle.seek(start)
    data = handle.read(size - start)
    at = data.find(MAGIC)
    while at != -1:
        handle.seek(start + at)
        if _read_frame(handle, size - start - at)[0] is not None:
            return start + at
        at = data.find(MAGIC, at + 1)
    return size


def _owner_only(path: str, flags: int) -> int:
    """open()'s opener for every file the spool creates: mode 0600, whatever the process umask."""
    return os.open(path, flags, 0o600)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
