"""Self-summarisation (Composer 2): the trajectory's one reward applies to every policy token of the chain.

A chain that summarised itself is still one trajectory: the summary-writing model calls are policy
tokens like the others (loss mask 1), so they share the final reward instead of getting none.
"""

from __future__ import annotations

from collections.abc import Sequence


def token_rewards(reward: float, loss_mask: Sequence[int]) -> list[float]:
    """(T,) reward on every policy token (mask 1, summaries included), 0 on observations (mask 0)."""
    return [reward if m else 0.0 for m in loss_mask]
