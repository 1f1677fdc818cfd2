"""Random ids for events, sessions and tool calls: the format of `uuid.uuid4().hex` (32 lowercase hex
digits, version 4, RFC 4122 variant) from the same source (os.urandom), without a UUID object and a
getrandom call per id, which cost a large share of the caller's recording call (docs/measurements.md). Ids
are made 256 at a time; a forked child drops the ones its parent made (else both would hand out the same ids).
"""

from __future__ import annotations

import os

IDS_PER_FILL = 256
VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))  # byte 6: version 4
VARIANT_RFC_4122 = bytes(b & 0x3F | 0x80 for b in range(256))  # byte 8: variant 10xx
_pool: list[str] = []  # ids not handed out yet; list.pop is atomic, so two threads never get one id
_fork_hook: list[bool] = []


def random_id() -> str:
    while True:  # other threads may empty a fresh pool before this one pops from it
        try:
            return _pool.pop()
        except IndexError:
            _fill()


def _fill() -> None:
    if not _fork_hook:  # registered on first use, not at import
        _fork_hook.append(True)
        os.register_at_fork(after_in_child=_pool.clear)
    raw = bytearray(os.urandom(16 * IDS_PER_FILL))
    raw[6::16] = raw[6::16].translate(VERSION_4)
    raw[8::16] = raw[8::16].translate(VARIANT_RFC_4122)
    digits = raw.hex()
    _pool.extend(digits[at:at + 32] for at in range(0, 32 * IDS_PER_FILL, 32))
