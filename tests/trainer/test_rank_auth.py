"""Ranks exchange nothing a process without trainer.deepspeed.rank_secret can forge: a peer that cannot prove
the secret is refused by every rank, and a decision whose HMAC does not check is refused before it is unpickled.
Real torch.distributed (gloo, two processes on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from liverl.io.processes import free_port
from trainer.step.rank_messages import RankAuthError, check_secret

ROOT = Path(__file__).resolve().parents[2]


def _world(secrets: tuple[str, str], modes: tuple[str, str], marker: Path) -> list[dict]:
    """Run rank 0 and rank 1 (each with its secret and mode); their JSON results, by rank."""
    port = free_port()
    peers = [subprocess.Popen([sys.executable, "-m", "tests.trainer.rank_peer", str(rank), str(port), secrets[rank],
                               modes[rank], str(marker)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    results = []
    for peer in peers:
        out, err = peer.communicate(timeout=120)
        assert peer.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_ranks_with_the_same_secret_join_and_agree(tmp_path):
    assert _world(("s3cret", "s3cret"), ("join", "join"), tmp_path / "m") == [{"joined": True}] * 2
    assert _world(("s3cret", "s3cret"), ("decide", "decide"), tmp_path / "m") == [{"value": {"plan": [1, 2, 3]}}] * 2


def test_a_peer_without_the_secret_is_refused_by_every_rank(tmp_path):
    results = _world(("guessed", "s3cret"), ("join", "join"), tmp_path / "m")
    assert all(r["error"].startswith("RankAuthError: rank ") and "did not prove" in r["error"]
               for r in results), results


def test_a_forged_pickle_is_refused_and_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"
    results = _world(("guessed", "s3cret"), ("evil", "decide"), marker)
    assert results[1]["error"].startswith("RankAuthError") and "nothing of it was unpickled" in results[1]["error"]
    assert not marker.exists()


def test_two_ranks_without_a_secret_do_not_start():
    with pytest.raises(RankAuthError, match="rank_secret"):
        check_secret("", world=2)
    assert check_secret("", world=1) == b""
