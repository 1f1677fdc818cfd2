"""The durable FIFO: order, commit, restart, size limit, and corruption that never blocks or drops the rest."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from liverl.io.spool import FRAME_HEADER, MAGIC, CorruptFrame, Spool, SpoolFull, encode_frame


def records(n: int, width: int = 30) -> list[bytes]:
    return [f"record-{i:04d}-".encode().ljust(width, b"x") for i in range(n)]


def drain(spool: Spool, batch: int = 7) -> list[bytes]:
    """Everything a reader gets, committing as it goes."""
    out: list[bytes] = []
    while not spool.empty():
        got, position = spool.read(batch)
        spool.commit(position, len(got))
        out += got
    return out


def segment(folder: Path) -> Path:
    """The only segment of a small spool."""
    (path,) = folder.glob("*.seg")
    return path


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_records_come_back_in_order_across_segments_and_commits(tmp_path):
    spool = Spool(tmp_path, segment_bytes=64)
    spool.append([b"a" * 20, b"b" * 20])
    spool.append([b"c" * 20])
    first, position = spool.read(2)
    assert first == [b"a" * 20, b"b" * 20]
    spool.commit(position, len(first))
    rest, position = spool.read(10)
    assert rest == [b"c" * 20]
    assert spool.pending() == 1
    spool.commit(position, 1)
    assert spool.empty() and spool.pending() == 0
    spool.append([b"d"])
    assert spool.read(10)[0] == [b"d"]


def test_read_respects_the_byte_budget_but_always_returns_one(tmp_path):
    spool = Spool(tmp_path)
    spool.append([b"x" * 50, b"y" * 50, b"z" * 50])
    assert spool.read(10, max_bytes=120)[0] == [b"x" * 50, b"y" * 50]
    assert spool.read(10, max_bytes=10)[0] == [b"x" * 50]


def test_a_restarted_spool_replays_exactly_what_was_not_committed(tmp_path):
    spool = Spool(tmp_path, segment_bytes=100)
    spool.append(records(10))
    done, position = spool.read(4)
    spool.commit(position, len(done))
    spool.close()
    again = Spool(tmp_path, segment_bytes=100)
    assert again.pending() == 6
    assert drain(again) == records(10)[4:]
    assert again.empty() and again.pending() == 0 and not list(tmp_path.glob("*.seg"))


def test_a_torn_tail_is_quarantined_and_cut_off_and_appending_continues(tmp_path):
    spool = Spool(tmp_path)
    spool.append([b"whole"])
    spool.close()
    torn = encode_frame(b"never acknowledged")[:-5]  # a crash mid-append
    with segment(tmp_path).open("ab") as handle:
        handle.write(torn)
    again = Spool(tmp_path)
    assert again.stats().corrupt_frames == 1 and again.stats().quarantined_bytes == len(torn)
    again.append([b"next"])
    assert drain(again) == [b"whole", b"next"]
    (quarantined,) = (tmp_path / "quarantine").iterdir()
    assert quarantined.read_bytes() == torn


def test_a_flipped_byte_mid_segment_quarantines_one_frame_and_delivers_every_other(tmp_path, caplog):
    spool = Spool(tmp_path)
    spool.append(records(20))
    spool.close()
    frame = FRAME_HEADER.size + len(records(1)[0])
    victim = 9
    flip_byte(segment(tmp_path), victim * frame + FRAME_HEADER.size + 3)  # inside record 9's payload

    seen: list[CorruptFrame] = []
    with caplog.at_level(logging.WARNING, logger="liverl.io.spool"):
        again = Spool(tmp_path)
        again.on_corrupt = seen.append
        assert again.pending() == 19
        assert drain(again) == [r for i, r in enumerate(records(20)) if i != victim]

    stats = again.stats()
    assert (stats.corrupt_frames, stats.quarantined_bytes, stats.pending) == (1, frame, 0)
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if "quarantined" in r.getMessage()]
    assert line["reason"] == "bad-checksum" and line["offset"] == victim * frame and line["bytes"] == frame
    (quarantined,) = (tmp_path / "quarantine").iterdir()
    assert quarantined.read_bytes()[FRAME_HEADER.size:] != records(20)[victim]
    assert len(quarantined.read_bytes()) == frame and quarantined.read_bytes()[:4] == MAGIC
    assert seen == []  # found while opening: counted in stats, before a callback could be set


def test_corruption_that_appears_while_open_is_found_by_read_and_reported(tmp_path):
    seen: list[CorruptFrame] = []
    spool = Spool(tmp_path, on_corrupt=seen.append)
    spool.append(records(5))
    frame = FRAME_HEADER.size + len(records(1)[0])
    flip_byte(segment(tmp_path), 2 * frame)  # the magic of record 2
    assert drain(spool, batch=2) == [records(5)[i] for i in (0, 1, 3, 4)]
    assert [(c.offset, c.length, c.reason) for c in seen] == [(2 * frame, frame, "bad-magic")]
    assert spool.stats().corrupt_frames == 1 and spool.pending() == 0


def test_an_impossible_length_field_is_quarantined_and_reading_resyncs(tmp_path):
    spool = Spool(tmp_path)
    spool.append(records(3))
    spool.close()
    path = segment(tmp_path)
    data = bytearray(path.read_bytes())
    data[4:8] = (0xFFFFFFF0).to_bytes(4, "big")  # record 0 claims almost 4 GiB
    path.write_bytes(bytes(data))
    seen: list[CorruptFrame] = []
    again = Spool(tmp_path)
    again.on_corrupt = seen.append
    assert drain(again) == records(3)[1:]
    assert again.stats().corrupt_frames == 1
    (quarantined,) = (tmp_path / "quarantine").iterdir()
    assert quarantined.read_bytes() == bytes(data[:FRAME_HEADER.size + len(records(1)[0])])


def test_a_region_is_quarantined_once_even_when_read_again_or_reopened(tmp_path):
    spool = Spool(tmp_path)
    spool.append(records(4))
    frame = FRAME_HEADER.size + len(records(1)[0])
    flip_byte(segment(tmp_path), frame + FRAME_HEADER.size)
    first, _ = spool.read(10)  # not committed: a failed delivery reads the same again
    second, _ = spool.read(10)
    assert first == second == [records(4)[i] for i in (0, 2, 3)]
    spool.close()
    again = Spool(tmp_path)
    assert spool.stats().corrupt_frames == 1 and again.stats().corrupt_frames == 0
    assert len(list((tmp_path / "quarantine").iterdir())) == 1
    assert drain(again) == [records(4)[i] for i in (0, 2, 3)]


def test_a_wholly_corrupt_spool_does_not_block_its_reader(tmp_path):
    spool = Spool(tmp_path)
    spool.append([b"only"])
    flip_byte(segment(tmp_path), FRAME_HEADER.size)
    assert spool.read(10)[0] == []
    assert spool.empty() and spool.pending() == 0
    spool.append([b"later"])
    assert drain(spool) == [b"later"]


def test_the_size_limit_refuses_instead_of_filling_the_disk(tmp_path):
    spool = Spool(tmp_path, max_bytes=100)
    spool.append([b"x" * 50])
    with pytest.raises(SpoolFull, match="raise the limit"):
        spool.append([b"y" * 60])
    assert spool.read(10)[0] == [b"x" * 50]


def test_spool_files_are_readable_by_their_owner_only(tmp_path):
    """Spooled records hold what users sent: no other local user may read them, whatever the umask."""
    import os
    import stat

    older = tmp_path / "spool"
    older.mkdir(mode=0o755)
    (older / "stale.tmp").write_bytes(b"x")
    os.chmod(older / "stale.tmp", 0o644)  # as a version before this rule left it
    previous = os.umask(0o022)
    try:
        spool = Spool(older)
        spool.append([b"a card number, say"])
        records, position = spool.read(10)
        spool.commit(position, len(records))
        spool.close()
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in older.rglob("*")}
    assert stat.S_IMODE(older.stat().st_mode) == 0o700
    assert modes and all(mode == 0o600 for mode in modes.values()), modes
