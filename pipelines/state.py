"""The distiller's own files: batch plans (write-ahead) and each batch's staged outputs.

    <state_uri>/plans/<seq>.json        the plan of batch `seq`: ranges, clock, carried state (immutable)
    <state_uri>/batches/<seq>/*.parquet  staged trajectories, dead letters, pending records, closed sessions

A plan is written before its batch runs and reused until the batch commits, so a re-run after a crash
reads the same offsets with the same clock and produces the same rows. The pending and closed files of a
batch become the distiller's state only when the trajectory commit names that folder
(COMMIT_DISTILL_STATE); a crashed batch's folder is simply rebuilt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.kafka_source import OffsetRange, RetentionGap


@dataclass(frozen=True)
class BatchPlan:
    seq: int  # Delta app-transaction version of the batch: 1, 2, ...
    batch_id: str  # the idempotency id on every row of the batch
    as_of_ms: int  # the batch's clock: readiness and distilled_at_ms use it, never the wall clock
    ranges: tuple[OffsetRange, ...]
    carried_state: str | None  # staged folder of the last committed batch (its pending + closed files)
    gaps: tuple[RetentionGap, ...] = ()  # retention gaps found when planning: dead letters of this batch

    def offsets(self) -> dict[str, dict[str, list[int]]]:
        """{topic: {partition: [first, end_exclusive]}} (names.COMMIT_KAFKA_OFFSETS)."""
        merged: dict[str, dict[str, list[int]]] = {}
        for r in self.ranges:
            span = merged.setdefault(r.topic, {}).setdefault(str(r.partition), [r.start, r.end])
            span[0], span[1] = min(span[0], r.start), max(span[1], r.end)
        return merged

    def new_records(self) -> int:
        return sum(r.end - r.start for r in self.ranges)

    def has_news(self) -> bool:
        """New records to read, or a retention gap to record (the offsets must advance past it)."""
        return self.new_records() > 0 or bool(self.gaps)

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"ranges": [list(r) for r in self.ranges],
                                          "gaps": [list(g) for g in self.gaps]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "BatchPlan":
        data = json.loads(text)
        return cls(**(data | {"ranges": tuple(OffsetRange(*r) for r in data["ranges"]),
                              "gaps": tuple(RetentionGap(*g) for g in data.get("gaps", ()))}))


@dataclass(frozen=True)
class StagedOutput:
    """One staged output of a batch, read lazily: the commit streams it file by file, never holding all of it.

    `extra` rows (made by the driver, e.g. retention-gap dead letters) follow the files' rows.
    """

    files: tuple[str, ...]
    schema: pa.Schema
    filesystem: pafs.FileSystem
    extra: pa.Table | None = None

    def plus(self, rows: pa.Table) -> "StagedOutput":
        return replace(self, extra=rows.cast(self.schema) if self.extra is None
                       else pa.concat_tables([self.extra, rows.cast(self.schema)]))

    def num_rows(self) -> int:
        """From the Parquet footers (and the extra rows), reading no data."""
        footers = sum(pq.ParquetFile(f, filesystem=self.filesystem).metadata.num_rows for f in self.files)
        return footers + (self.extra.num_rows if self.extra is not None else 0)

    def columns(self, *names: str) -> pa.Table:
        """Only these columns of every row (small ones: ids, reasons), e.g. to count sessions."""
        tables = [pq.read_table(f, filesystem=self.filesystem, schema=self.schema, columns=list(names))
                  for f in self.files]
        if self.extra is not None:
            tables.append(self.extra.select(list(names)))
        return pa.concat_tables(tables) if tables else self.schema.empty_table().select(list(names))

    def reader(self) -> pa.RecordBatchReader:
        """Every row as a stream of record batches in the staged schema (what the Delta writer consumes)."""
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for f in self.files:
            for batch in pq.ParquetFile(f, filesystem=self.filesystem).iter_batches(batch_size=1024):
                yield batch.cast(self.schema)  # the staged schema exactly (Parquet may drop field metadata)
        if self.extra is not None:
            yield from self.extra.to_batches()


class StateStore:
    def __init__(self, root_uri: str):
        if "://" not in root_uri:
            root_uri = os.path.abspath(root_uri)
        self.root = root_uri.rstrip("/")
        self._fs, self._root_path = pafs.FileSystem.from_uri(self.root)

    def batch_dir(self, seq: int) -> str:
        """URI of a batch's staging folder (for Beam's writers and the commit metadata)."""
        return f"{self.root}/batches/{seq:010d}"

    def load_plan(self, seq: int) -> BatchPlan | None:
        path = self._plan_path(seq)
        if self._fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with self._fs.open_input_stream(path) as stream:
            return BatchPlan.from_json(stream.read().decode())

    def save_plan(self, plan: BatchPlan) -> None:
        self._fs.create_dir(f"{self._root_path}/plans", recursive=True)
        temporary = self._plan_path(plan.seq) + ".tmp"
        with self._fs.open_output_stream(temporary) as stream:
            stream.write(plan.to_json().encode())
        self._fs.move(temporary, self._plan_path(plan.seq))

    def drop_plan(self, seq: int) -> None:
        self._delete_file(self._plan_path(seq))

    def reset_batch_dir(self, seq: int) -> None:
        """Empty a batch's staging folder before (re)running it, so no shard of a crashed run survives."""
        path = self._local(self.batch_dir(seq))
        if self._fs.get_file_info(path).type != pafs.FileType.NotFound:
            self._fs.delete_dir(path)
        self._fs.create_dir(path, recursive=True)

    def open_staged(self, batch_uri: str, name: str, schema: pa.Schema) -> StagedOutput:
        return StagedOutput(tuple(self._staged_files(batch_uri, name)), schema, self._fs)

    def read_staged(self, batch_uri: str, name: str, schema: pa.Schema) -> pa.Table:
        tables = [pq.read_table(f, filesystem=self._fs, schema=schema) for f in self._staged_files(batch_uri, name)]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _staged_files(self, batch_uri: str, name: str) -> list[str]:
        return sorted(info.path for info in self._list(self._local(batch_uri))
                      if info.base_name.startswith(f"{name}-") and info.base_name.endswith(".parquet"))

    def count_staged(self, batch_uri: str | None, name: str) -> int:
        """Rows in a staged output, from the Parquet footers only."""
        if batch_uri is None:
            return 0
        files = self._staged_files(batch_uri, name)
        return sum(pq.ParquetFile(f, filesystem=self._fs).metadata.num_rows for f in files)

    def staged_seqs(self) -> list[int]:
        """The batches whose staging folder exists, oldest first."""
        return sorted(int(info.base_name) for info in self._list(f"{self._root_path}/batches")
                      if info.base_name.isdigit())

    def prune(self, committed_seq: int, keep: int, audited_seq: int | None = None) -> None:
        """Delete plans up to the committed batch and staging folders older than the last `keep` batches.

        `audited_seq`: every batch up to it is audited; a later batch's folder holds the sources of its
        traces, so it stays until the auditor is past it (None: no audit waits, e.g. audit off)."""
        for info in self._list(f"{self._root_path}/plans"):
            if info.base_name.split(".")[0].isdigit() and int(info.base_name.split(".")[0]) <= committed_seq:
                self._delete_file(info.path)
        last = committed_seq - max(keep, 1)
        if audited_seq is not None:
            last = min(last, audited_seq)
        for seq in self.staged_seqs():
            if seq <= last:
                self._fs.delete_dir(self._local(self.batch_dir(seq)))

    def _plan_path(self, seq: int) -> str:
        return f"{self._root_path}/plans/{seq:010d}.json"

    def _local(self, uri: str) -> str:
        return self._root_path + uri[len(self.root):]

    def _list(self, path: str):
        return self._fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))

    def _delete_file(self, path: str) -> None:
        if self._fs.get_file_info(path).type != pafs.FileType.NotFound:
            self._fs.delete_file(path)
