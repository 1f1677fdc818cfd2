"""One process of a 2-rank gloo world for tests/trainer/test_rank_auth.py: rank, port, secret, then what it does.

    python -m tests.trainer.rank_peer RANK PORT SECRET join|evil|decide MARKER

join: authenticate and report; evil (rank 0 only): skip the proof and broadcast a pickle that would create
MARKER when unpickled; decide: receive (or, rank 0, send) one decision. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path


class Evil:
    """Unpickling it creates the marker file: the proof that a rank ran what an outsider sent."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (Path(self.marker),)


def main(rank: int, port: int, secret: str, mode: str, marker: str) -> None:
    import torch.distributed as dist

    from trainer.step.ranks import Ranks

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    ranks = Ranks(rank, 2, "cpu", secret=secret.encode())
    try:
        if mode == "join":
            ranks.authenticate()
            result = {"joined": True}
        elif mode == "evil" and rank == 0:
            result = {"sent": ranks._broadcast(Evil(marker)) is not None}  # rank 0 never unpickles its own
        else:
            result = {"value": ranks.decide(lambda: {"plan": [1, 2, 3]})}
    except Exception as error:  # noqa: BLE001 - reported to the test
        result = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(result, default=str), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
