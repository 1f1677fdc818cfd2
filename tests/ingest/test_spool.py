"""The durable FIFO: order, commit, restart, torn tails, size limit."""

from __future__ import annotations

import pytest

from ingest.spool import Spool, SpoolFull


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


def test_a_reopened_spool_resumes_from_its_committed_cursor(tmp_path):
    spool = Spool(tmp_path)
    spool.append([b"1", b"2", b"3"])
    done, position = spool.read(1)
    spool.commit(position, 1)
    spool.close()
    again = Spool(tmp_path)
    assert again.pending() == 2
    assert again.read(10)[0] == [b"2", b"3"]


def test_a_torn_frame_at_the_tail_is_cut_off_and_appending_continues(tmp_path):
    spool = Spool(tmp_path)
    spool.append([b"whole"])
    spool.close()
    segment = next(tmp_path.glob("*.seg"))
    with segment.open("ab") as handle:
        handle.write(b"\x00\x00\x00\x09\x00")  # a crash mid-append: never acknowledged
    again = Spool(tmp_path)
    again.append([b"next"])
    assert again.read(10)[0] == [b"whole", b"next"]


def test_the_size_limit_refuses_instead_of_filling_the_disk(tmp_path):
    spool = Spool(tmp_path, max_bytes=100)
    spool.append([b"x" * 50])
    with pytest.raises(SpoolFull, match="raise the limit"):
        spool.append([b"y" * 60])
    assert spool.read(10)[0] == [b"x" * 50]
