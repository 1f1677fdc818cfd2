"""Authenticated messages between the ranks of one trainer (trainer.deepspeed.rank_secret).

torch.distributed's rendezvous and gloo connections take any process that reaches the port, and its
broadcast_object_list unpickles whatever arrives. So the ranks send bytes tensors only, rank 0's decisions
sealed with an HMAC-SHA256 of the shared secret, a purpose and a sequence number (a replayed or reordered
message fails too); a rank checks the tag before it unpickles anything. At start every rank proves it
holds the secret (an HMAC of a fresh nonce from rank 0 and its rank); a peer that cannot is refused by all.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
import secrets

TAG_BYTES = 32
NONCE_BYTES = 32


class RankAuthError(RuntimeError):
    """A rank or a message did not prove the shared secret: the world is refused, nothing is unpickled."""


def check_secret(secret: str, world: int) -> bytes:
    if world > 1 and not secret:
        raise RankAuthError(f"a world of {world} ranks needs trainer.deepspeed.rank_secret: set the same secret on "
                            "every rank (LIVERL_TRAINER__DEEPSPEED__RANK_SECRET, from a secret store), so no "
                            "other process reaching the rendezvous can join or send the ranks a pickle")
    return secret.encode()


def tag(secret: bytes, purpose: bytes, sequence: int, payload: bytes) -> bytes:
    return hmac.new(secret, purpose + b"\x00" + sequence.to_bytes(8, "big") + payload, hashlib.sha256).digest()


def seal(secret: bytes, sequence: int, value: object) -> bytes:
    """value pickled, behind its tag."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return tag(secret, b"decision", sequence, payload) + payload


def unseal(secret: bytes, sequence: int, sealed: bytes, rank: int) -> object:
    """The value rank 0 sealed; RankAuthError (and nothing unpickled) when the tag does not check."""
    received, payload = sealed[:TAG_BYTES], sealed[TAG_BYTES:]
    if len(received) != TAG_BYTES or not hmac.compare_digest(received, tag(secret, b"decision", sequence, payload)):
        raise RankAuthError(f"rank {rank} refused message {sequence} from rank 0: its HMAC does not check (another "
                            "process on the rendezvous, or a different trainer.deepspeed.rank_secret): nothing of it "
                            "was unpickled; give every rank the same secret")
    return pickle.loads(payload)  # noqa: S301 - authenticated above: only a holder of the secret sealed it


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(secret: bytes, nonce: bytes, rank: int) -> bytes:
    """What rank `rank` answers rank 0's nonce with."""
    return tag(secret, b"join", rank, nonce)
