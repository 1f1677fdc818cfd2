"""The data-parallel ranks of one trainer: rank 0 decides, every rank learns what it decided.

Rank 0 alone reads the table, writes the state file and talks to the registry; the other ranks train their
share of each step and wait for rank 0's decisions (the step plan, "checkpoint now", the publish result).
`decide` carries a failure too, so no rank waits forever on a broadcast that will never come.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

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

    def _broadcast(self, value: object) -> object:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device if self.device != "cpu" else None)
        return box[0]

    def _all_reduce(self, values: Sequence[float], op: str) -> list[float]:
        if self.world == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor.tolist()
