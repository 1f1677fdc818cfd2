"""Which sessions the canary takes (serving/router.py): a place no client can choose, the same on every replica of
one deployment, drawn afresh for each candidate; while a tenant's key is unreadable, still whole and at its share.

The gate judges a canary on the sessions each version served (trainer/gate/canary.py) and assumes they are draws from
the same traffic. A client that could tell which session ids the canary takes could send its good sessions to one
version and its bad ones to the other. Bounds are 5 binomial standard deviations: each holds but for about 6e-7 of
the random keys these tests make.
"""

import hashlib
from pathlib import Path

from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from serving.router import Router, Slot

FRACTION = 0.2
SESSIONS = [f"s{i}" for i in range(4000)]


def _router(session_key, canary_version="2"):
    router = Router(FRACTION, session_key=session_key)
    router.switch(Slot("1", None, None, Path("."), ""))
    router.canary = Slot(canary_version, None, None, Path("."), "")
    return router


def _canary_sessions(router, sessions=SESSIONS, tenant="acme") -> set[str]:
    canary = router.canary.version
    return {s for s in sessions if router.acquire(tenant, s).version == canary}


def _near(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) < 5 * (n * p * (1 - p)) ** 0.5


def test_replicas_on_one_key_store_place_every_session_alike(tmp_path):
    store = tmp_path / "keys"
    first = _canary_sessions(_router(Pseudonyms(FileKeyStore(store)).session))
    second = _canary_sessions(_router(Pseudonyms(FileKeyStore(store)).session))  # another process, the same store
    assert first == second and _near(len(first), len(SESSIONS), FRACTION)


def test_session_ids_chosen_against_the_source_reach_the_canary_at_its_share(tmp_path):
    # What a client could do when the key was in the source: keep the ids a keyed hash under that key places on
    # the canary, and send its chosen sessions under them. Every one of them went to the canary then.
    known_key = b"liverl-canary-sessions"
    chosen = [s for s in (f"pick{i}" for i in range(40_000))
              if int.from_bytes(hashlib.blake2b(f"acme/{s}".encode(), digest_size=8, key=known_key).digest(), "big")
              / 2.0 ** 64 < FRACTION]
    taken = _canary_sessions(_router(Pseudonyms(FileKeyStore(tmp_path / "keys")).session), chosen)
    assert _near(len(taken), len(chosen), FRACTION), f"{len(taken)} of {len(chosen)} chosen ids reached the canary"
    # Nor does a deployment's placement tell a client another's: two key stores agree only by chance.
    other = _canary_sessions(_router(Pseudonyms(FileKeyStore(tmp_path / "elsewhere")).session), chosen)
    assert _near(len(taken & other), len(chosen), FRACTION ** 2)


def test_each_candidate_draws_its_sessions_afresh(tmp_path):
    key = Pseudonyms(FileKeyStore(tmp_path / "keys")).session
    second, third = _canary_sessions(_router(key, "2")), _canary_sessions(_router(key, "3"))
    assert _near(len(third), len(SESSIONS), FRACTION)
    # Independent draws share FRACTION^2 of the sessions; one fixed place for every candidate would share all.
    assert _near(len(second & third), len(SESSIONS), FRACTION ** 2)


def test_while_a_key_is_unreadable_sessions_stay_whole_and_the_canary_keeps_its_share(caplog):
    def unreadable(tenant: str, session_id: str) -> str:
        raise OSError("the key store is unreachable")

    router = _router(unreadable)
    first = {s: router.acquire("acme", s).version for s in SESSIONS}
    assert all(router.acquire("acme", s).version == first[s] for s in SESSIONS[:500] for _ in range(2))
    assert _near(sum(v == "2" for v in first.values()), len(SESSIONS), FRACTION)
    assert caplog.text.count("places tenant 'acme'") == 1  # once, not once a call
