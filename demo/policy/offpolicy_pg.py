"""A minimal off-policy policy-gradient step, the calibration's stand-in for the DeepSpeed trainer.

Token-level, with the importance ratio against the behaviour logprobs that served each completion
(clipped, PPO-style) and the session's advantage on every sampled token of the trained agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PgSample:
    """One policy call of the trained agent. Produced from a session's PolicyTurns, consumed by pg_loss."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float


def pg_loss(model, samples: Sequence[PgSample], pad_id: int, clip: float = 0.2):
    """Mean over completion tokens of -min(ratio * A, clip(ratio) * A); returns (loss, mean ratio)."""
    import torch

    length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(samples), length))  # (B, T) 1 where the target token was sampled
    behaviour = torch.zeros((len(samples), length))
    advantage = torch.tensor([s.advantage for s in samples]).unsqueeze(1)  # (B, 1)
    for row, s in enumerate(samples):
        sequence = (*s.prompt_ids, *s.completion_ids)
        ids[row, : len(sequence)] = torch.tensor(sequence)
        start = len(s.prompt_ids)
        mask[row, start : len(sequence)] = 1.0
        behaviour[row, start : len(sequence)] = torch.tensor(s.behaviour_logprobs)
    logits = model(input_ids=ids).logits[:, :-1].float()  # (B, T-1, V): position t predicts token t+1
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    mask, behaviour = mask[:, 1:], behaviour[:, 1:]
    ratio = torch.exp((logp - behaviour) * mask)
    objective = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
    loss = -(objective * mask).sum() / mask.sum()
    mean_ratio = float((ratio.detach() * mask).sum() / mask.sum())
    return loss, mean_ratio
