"""Token-budget micro-batches: trajectories packed so that (count × longest) stays within the budget."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sample:
    """One trajectory ready for the model, produced by the step builder."""

    token_ids: list[int]  # (T,) cut to max_seq_len
    loss_mask: list[int]  # (T,) 0 on token 0 (nothing predicts it)
    behaviour_logprobs: list[float]  # (T,)
    advantage: float
    weight: float  # staleness weight (1.0 fresh)


@dataclass(frozen=True)
class MicroBatch:
    token_ids: torch.Tensor  # (B, T) long, right-padded with 0
    attention_mask: torch.Tensor  # (B, T) long
    loss_mask: torch.Tensor  # (B, T) float: loss mask × staleness weight
    behaviour_logprobs: torch.Tensor  # (B, T) float
    advantages: torch.Tensor  # (B,) float
    real_tokens: int  # unpadded tokens, for tokens/s

    @property
    def masked_tokens(self) -> float:
        return float(self.loss_mask.sum())

    def to(self, device) -> "MicroBatch":
        return MicroBatch(self.token_ids.to(device), self.attention_mask.to(device), self.loss_mask.to(device),
                          self.behaviour_logprobs.to(device), self.advantages.to(device), self.real_tokens)


def pack(samples: list[Sample], token_budget: int) -> list[list[Sample]]:
    """Greedy in order (the order is the table's, so a cursor stays meaningful); one sample at least per batch."""
    batches: list[list[Sample]] = []
    current: list[Sample] = []
    longest = 0
    for sample in samples:
        grown = max(longest, len(sample.token_ids))
        if current and grown * (len(current) + 1) > token_budget:
            batches.append(current)
            current, grown = [], len(sample.token_ids)
        current.append(sample)
        longest = grown
    if current:
        batches.append(current)
    return batches


def collate(samples: list[Sample]) -> MicroBatch:
    width = max(len(sample.token_ids) for sample in samples)
    rows = len(samples)
    token_ids = torch.zeros(rows, width, dtype=torch.long)
    attention = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width)
    behaviour = torch.zeros(rows, width)
    for row, sample in enumerate(samples):
        length = len(sample.token_ids)
        token_ids[row, :length] = torch.tensor(sample.token_ids)
        attention[row, :length] = 1
        mask[row, :length] = torch.tensor(sample.loss_mask, dtype=torch.float) * sample.weight
        behaviour[row, :length] = torch.tensor(sample.behaviour_logprobs)
    mask[:, 0] = 0.0
    return MicroBatch(
        token_ids=token_ids,
        attention_mask=attention,
        loss_mask=mask,
        behaviour_logprobs=behaviour,
        advantages=torch.tensor([sample.advantage for sample in samples]),
        real_tokens=int(attention.sum()),
    )


def token_logprobs(model, token_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) log π(token_t | tokens_<t); column 0 is 0 (token 0 has no prefix)."""
    logits = model(input_ids=token_ids, attention_mask=attention_mask).logits  # (B, T, V)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, token_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))
