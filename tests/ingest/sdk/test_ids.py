"""The SDK's ids keep the format of uuid4().hex: 32 lowercase hex digits, version 4, RFC 4122 variant."""

from __future__ import annotations

import uuid

from ingest.sdk.ids import random_id


def test_ids_are_uuid4_hex_and_do_not_repeat():
    ids = [random_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_a_forked_child_never_hands_out_its_parents_ids():
    import os

    random_id()  # the pool is filled before the fork
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(writer, random_id().encode())
        os._exit(0)
    os.waitpid(child, 0)
    from_child = os.read(reader, 64).decode()
    os.close(reader)
    os.close(writer)
    assert from_child != random_id()  # the parent's next id: the one the child would have taken
