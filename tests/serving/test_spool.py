"""The disk spool: records come back in order, survive a restart, and a full spool refuses."""

from serving.spool import OutRecord, Spool


def _record(i: int) -> OutRecord:
    return OutRecord("topic", f"k{i}".encode(), bytes([i, 0, 255]), (("h", b"\x00\x01"),), 1.5)


def test_replay_in_order_across_a_restart(tmp_path):
    spool = Spool(tmp_path, 1 << 20)
    for i in range(3):
        assert spool.append(_record(i))
    reopened = Spool(tmp_path, 1 << 20)  # a restarted server finds them
    assert reopened.pending()
    sent = []
    assert reopened.replay(sent.extend) == 3
    assert sent == [_record(i) for i in range(3)]
    assert not reopened.pending() and reopened.size() == 0


def test_failed_replay_keeps_the_segment(tmp_path):
    spool = Spool(tmp_path, 1 << 20)
    spool.append(_record(1))

    def refuse(records):
        raise ConnectionError("broker down")

    try:
        spool.replay(refuse)
    except ConnectionError:
        pass
    sent = []
    spool.replay(sent.extend)
    assert sent == [_record(1)]


def test_full_spool_refuses(tmp_path):
    spool = Spool(tmp_path, len(_record(0).to_line()) + 1)
    assert spool.append(_record(0))
    assert not spool.append(_record(1))
