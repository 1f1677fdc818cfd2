"""A disk spool for records Kafka could not take: append now, replay in order once Kafka is back.

One JSON line per record in numbered segment files; a segment is deleted only after every record in
it was acknowledged, so a crash replays a segment at most twice (consumers dedupe on event_id).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OutRecord:
    """One Kafka record waiting to be sent."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    finished_at: float = 0.0  # time.time() the completion finished (recording lag)

    def to_line(self) -> str:
        return json.dumps({"topic": self.topic, "key": _b64(self.key), "value": _b64(self.value),
                           "headers": [[k, _b64(v)] for k, v in self.headers], "finished_at": self.finished_at})

    @staticmethod
    def from_line(line: str) -> "OutRecord":
        d = json.loads(line)
        return OutRecord(d["topic"], base64.b64decode(d["key"]), base64.b64decode(d["value"]),
                         tuple((k, base64.b64decode(v)) for k, v in d["headers"]), d.get("finished_at", 0.0))


class Spool:
    def __init__(self, folder: Path, max_bytes: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._segment = self._next_segment()
        self._pending = self.size() > 0

    def append(self, record: OutRecord) -> bool:
        """Write one record; False (and nothing written) when the spool is full."""
        line = record.to_line() + "\n"
        with self._lock:
            if self.size() + len(line) > self.max_bytes:
                return False
            with self._segment.open("a", encoding="utf-8") as sink:
                sink.write(line)
            self._pending = True
            return True

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.folder.glob("*.jsonl") if p.exists())

    def pending(self) -> bool:
        """Records wait in the spool (cheap: no disk access)."""
        return self._pending

    def replay(self, send_all: Callable[[list[OutRecord]], None]) -> int:
        """Hand each closed segment's records to send_all (which raises unless all were acknowledged),
        oldest first; delete a segment once sent. Returns how many records were replayed."""
        with self._lock:  # close the segment being written so new records go to a fresh one
            if self._segment.exists():
                self._segment = self._next_segment()
        replayed = 0
        for segment in sorted(self.folder.glob("*.jsonl"), key=_segment_number):
            if segment == self._segment:
                continue
            records = [OutRecord.from_line(line) for line in segment.read_text(encoding="utf-8").splitlines() if line]
            send_all(records)
            segment.unlink()
            replayed += len(records)
        with self._lock:
            self._pending = self._segment.exists()
        return replayed

    def _next_segment(self) -> Path:
        numbers = [_segment_number(p) for p in self.folder.glob("*.jsonl")]
        return self.folder / f"{max(numbers, default=0) + 1:012d}.jsonl"


def _segment_number(path: Path) -> int:
    return int(path.stem)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
