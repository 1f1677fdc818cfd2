"""Which capture replica owns a session, and sending a request's events to the replicas that own them.

Ownership is a rendezvous (highest random weight) hash of the session's Kafka key over ingest.replicas:
every replica computes the same owner from the same list without talking to the others, and adding or
removing a replica moves only the sessions that replica gains or held (1/N of them), not a reshuffle.
A replica that receives events of a session it does not own forwards them, in their request order, to
the owner over the same Capture RPC; the owner's answer is the caller's answer, so an acknowledgement
still means "stored" (by the owner). See ingest/sessions.py for why state is partitioned this way.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from liverl.contracts.keys import session_key
from liverl.v1 import capture_pb2

CAPTURE_METHOD = "/liverl.v1.CaptureService/Capture"
REPLICA_TOKEN_META = "x-liverl-replica-token"  # marks a forwarded request: the owner neither charges nor routes it


class ReplicaRing:
    def __init__(self, replicas: Sequence[str], own_address: str):
        if len(set(replicas)) < len(replicas):
            raise ValueError(f"ingest.replicas lists an address twice: {list(replicas)}")
        if replicas and own_address not in replicas:
            raise ValueError(f"this replica's address {own_address!r} is not in ingest.replicas {list(replicas)}; "
                             "set ingest.replica_address to its entry there")
        self.replicas = tuple(replicas) or (own_address,)
        self.own_address = own_address
        self._seeds = [(address, address.encode() + b"\0") for address in self.replicas]

    @property
    def scope(self) -> str:
        """The ring's identity for the session state: a change means sessions may have moved."""
        return ",".join(sorted(self.replicas)) if len(self.replicas) > 1 else ""

    def owner_of(self, tenant: str, session_id: str) -> str:
        if len(self.replicas) == 1:
            return self.own_address
        key = session_key(tenant, session_id)
        return max(self._seeds, key=lambda seed: hashlib.blake2b(seed[1] + key, digest_size=8).digest())[0]


@dataclass
class Forwarded:
    """Events of one request sent to one owner: their indexes in the caller's request, and the call."""
    owner: str
    indexes: list[int] = field(default_factory=list)
    events: list = field(default_factory=list)
    future: grpc.Future | None = None


class PeerForwarder:
    """gRPC channels to the other replicas (kept open), authenticated as the caller's tenant.

    A request waiting on an owner holds a server thread, so at most `max_waiting` requests may wait at
    once (fewer than the server's threads): the rest stay free for requests forwarded here, which never
    wait on a peer, and two replicas can never fill each other's threads with waits on each other.
    """

    def __init__(self, tenant_tokens: Mapping[str, str], replica_token: str, tls_cert_file: Path | None = None,
                 max_waiting: int = 8):
        self.waiting = threading.BoundedSemaphore(max_waiting)  # acquire(blocking=False); release when answered
        self.max_waiting = max_waiting
        self._tenant_tokens = dict(tenant_tokens)
        self.replica_token = replica_token
        self._tls_cert = tls_cert_file.read_bytes() if tls_cert_file else None
        self._calls: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._channels: list[grpc.Channel] = []

    def is_peer(self, presented: str | None) -> bool:
        """Whether a request carries the replicas' shared secret (it was forwarded by one of them)."""
        return bool(self.replica_token and presented) and hmac.compare_digest(presented.encode(),
                                                                              self.replica_token.encode())

    def send(self, tenant: str, batch: Forwarded, timeout_s: float) -> None:
        request = capture_pb2.CaptureRequest(events=batch.events).SerializeToString()
        metadata = (("authorization", f"Bearer {self._tenant_tokens[tenant]}"),
                    (REPLICA_TOKEN_META, self.replica_token))
        batch.future = self._call(batch.owner).future(request, metadata=metadata, timeout=max(0.001, timeout_s))

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def _call(self, owner: str) -> grpc.UnaryUnaryMultiCallable:
        if owner not in self._calls:
            if self._tls_cert:
                channel = grpc.secure_channel(owner, grpc.ssl_channel_credentials(root_certificates=self._tls_cert))
            else:
                channel = grpc.insecure_channel(owner)
            self._channels.append(channel)
            self._calls[owner] = channel.unary_unary(CAPTURE_METHOD, request_serializer=None,
                                                     response_deserializer=capture_pb2.CaptureResponse.FromString)
        return self._calls[owner]
