"""The data-parallel ranks of one trainer: rank 0 decides, every rank learns what it decided.

Rank 0 alone reads the table, writes the state file and talks to the registry; the other ranks train their
share of each step and wait for rank 0's decisions (the step plan, "checkpoint now", the publish result).
`decide` carries a failure too, so no rank waits forever on a broadcast that will never come. Decisions travel
as HMAC-sealed bytes (trainer.step.rank_messages): no rank unpickles what a process without the secret sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from trainer.step import rank_messages

T = TypeVar("T")


@dataclass(frozen=True)
class _Failed:
    """Sent instead of a decision when rank 0 raised while making it."""

    message: str


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    device: str = "cpu"  # where collective tensors live (cuda:N under nccl)
    secret: bytes = field(default=b"", repr=False)  # trainer.deepspeed.rank_secret: seals every decision
    _sent: list[int] = field(default_factory=lambda: [0], repr=False, compare=False)  # decisions so far (their seq)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def decide(self, decide: Callable[[], T]) -> T:
        """Rank 0 runs decide() and every rank returns its result (pickled: plans, flags, publish results).
        If rank 0 raises, it re-raises and every other rank raises too."""
        if self.world == 1:
            return decide()
        if self.main:
            try:
                value = decide()
            except BaseException as error:
                self._broadcast(_Failed(f"{type(error).__name__}: {error}"))
                raise
            return self._broadcast(value)
        value = self._broadcast(None)
        if isinstance(value, _Failed):
            raise RuntimeError(f"rank 0 failed, so rank {self.rank} stops too: {value.message}")
        return value

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (a SIGTERM reaches the ranks at different moments)."""
        return bool(self._all_reduce([float(flag)], "max")[0])

    def sum(self, values: Sequence[float]) -> list[float]:
        return self._all_reduce(values, "sum")

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def authenticate(self) -> None:
        """Every rank proves the shared secret (an HMAC of rank 0's fresh nonce and its own rank); any rank that
        does not is refused by all of them (RankAuthError on every rank), before any decision is exchanged."""
        if self.world == 1:
            return
        import torch.distributed as dist

        nonce = self._bytes_from_rank0(rank_messages.new_nonce() if self.main else b"")
        mine = self._tensor(rank_messages.proof(self.secret, nonce, self.rank))
        proofs = [self._tensor(bytes(rank_messages.TAG_BYTES)) for _ in range(self.world)]
        dist.all_gather(proofs, mine)
        refused = [rank for rank, got in enumerate(proofs) if not hmac.compare_digest(
            got.cpu().numpy().tobytes(), rank_messages.proof(self.secret, nonce, rank))]
        if refused:
            raise rank_messages.RankAuthError(
                f"rank {self.rank} refused the world: rank(s) {refused} did not prove trainer.deepspeed.rank_secret "
                "(a process that is not one of this trainer's ranks, or a different secret): give every rank the same")

    def _broadcast(self, value: object) -> object:
        """Rank 0's value on every rank, sealed and checked (the sequence makes a replayed message fail)."""
        sequence = self._sent[0]
        self._sent[0] += 1
        if self.main:
            self._bytes_from_rank0(rank_messages.seal(self.secret, sequence, value))
            return value
        return rank_messages.unseal(self.secret, sequence, self._bytes_from_rank0(b""), self.rank)

    def _bytes_from_rank0(self, data: bytes) -> bytes:
        """Rank 0's bytes on every rank, as two tensor broadcasts (a length, then the bytes): never a pickle."""
        import torch
        import torch.distributed as dist

        length = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        dist.broadcast(length, src=0)
        buffer = self._tensor(data) if self.main else torch.empty(int(length.item()), dtype=torch.uint8,
                                                                   device=self.device)
        dist.broadcast(buffer, src=0)
        return data if self.main else bytes(buffer.cpu().numpy().tobytes())

    def _tensor(self, data: bytes):
        import torch

        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device) if data else \
            torch.empty(0, dtype=torch.uint8, device=self.device)

    def _all_reduce(self, values: Sequence[float], op: str) -> list[float]:
        if self.world == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor.tolist()
