"""Samples (one per trained window of a trajectory) and token-budget micro-batches of them (padded layout here;
the packed layout, the training default, is trainer/step/packing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from trainer.gate.scoring import DEFAULT_CHUNK_TOKENS, ScoredPair, ScoredTokens, TokenSampling, score_pair, score_tokens
from trainer.step.trajectory import Trajectory


@dataclass(frozen=True)
class Sample:
    """One window of a trajectory ready for the model (trajectory_samples builds them)."""

    token_ids: list[int]  # (T,) at most max_seq_len
    loss_mask: list[int]  # (T,) 0 on context-only tokens; token 0 never carries a loss (nothing predicts it)
    behaviour_logprobs: list[float]  # (T,)
    advantage: float
    weight: float  # staleness weight (1.0 fresh)
    # How each token was sampled, (T,) each; empty: temperature 1, untruncated (rows without the columns).
    temperature: list[float] = field(default_factory=list)
    top_p: list[float] = field(default_factory=list)
    top_k: list[int] = field(default_factory=list)
    position_offset: int = 0  # position of token 0 within its segment (windows after the first)
    # An imported trajectory's window: its loss-masked tokens get the supervised term -advantage·log π (the
    # advantage is then the trajectory's SFT weight), never an importance ratio (trainer/step/losses.py).
    supervised: bool = False


@dataclass(frozen=True)
class MicroBatch:
    """Rows of one or more samples (trainer/step/packing.py lays them out), right-padded to the widest row."""

    token_ids: torch.Tensor  # (B, T) long, right-padded with 0
    attention_mask: torch.Tensor  # (B, T) long, 1 on real tokens
    loss_mask: torch.Tensor  # (B, T) float: loss mask × staleness weight; 0 on each sample's first token
    behaviour_logprobs: torch.Tensor  # (B, T) float
    advantages: torch.Tensor  # (B, T) float: each token its sample's advantage, 0 on padding
    real_tokens: int  # unpadded tokens, for tokens/s
    temperature: torch.Tensor  # (B, T) float, 1 on padding
    top_p: torch.Tensor  # (B, T) float, 1 on padding
    top_k: torch.Tensor  # (B, T) long, 0 on padding
    # (B, T) bool: tokens of supervised (imported) samples, False on padding. Per token because a packed row
    # mixes served and imported windows.
    supervised: torch.Tensor
    position_ids: torch.Tensor | None = None  # (B, T) long, each sample's own; None: every row starts at 0
    # (B, T) long: which sample of its row each token belongs to, -1 on padding; None: one sample per row.
    sequence_ids: torch.Tensor | None = None
    # (B, T) bool: served tokens of a window that starts after its segment does (Trajectory.windows), so the
    # window holds less context than serving sampled them with: unscorable (score_batch). None: no such token.
    context_cut: torch.Tensor | None = None

    @property
    def computed_tokens(self) -> int:
        """Tokens the model computes, padding included (rows × width)."""
        return self.token_ids.numel()

    @property
    def masked_tokens(self) -> float:
        """Σ loss mask × weight (weighted)."""
        return float(self.loss_mask.sum())

    @property
    def trained_tokens(self) -> int:
        """Tokens with a loss term, unweighted: the step's loss is a mean over these, so staleness weights
        scale a trajectory's gradient instead of cancelling out of a weighted mean."""
        return int((self.loss_mask > 0).sum())

    @property
    def sampling(self) -> TokenSampling:
        return TokenSampling(self.temperature, self.top_p, self.top_k)

    def to(self, device) -> "MicroBatch":
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return MicroBatch(**{name: value.to(device) if isinstance(value, torch.Tensor) else value
                             for name, value in moved.items()})


def trajectory_samples(trajectory: Trajectory, weight: float, max_seq_len: int, advantage: float = 0.0) -> list[Sample]:
    """One sample per window (Trajectory.windows): every segment is its own sequence, as serving sampled it,
    and a segment longer than max_seq_len is split into windows (a later window's served tokens are unscorable:
    its context is cut, see trainer/step/trajectory.py). Every window shares
    the trajectory's advantage and staleness weight (the final reward covers the whole chain); windows
    with nothing to train are left out.

    An imported trajectory's windows are supervised: `advantage` is then its SFT weight, and its tokens are scored
    at temperature 1 untruncated whatever the original call's sampling was (the target is π itself; there is no
    behaviour distribution to match)."""
    t = trajectory
    samples = []
    for w in t.windows(max_seq_len):
        mask = [0] * (w.trained_from - w.start) + list(t.loss_mask[w.trained_from:w.end])
        if not any(mask[1:]):
            continue
        temperature, top_p, top_k = ([], [], []) if t.imported else t.token_sampling(w.start, w.end)
        samples.append(Sample(list(t.token_ids[w.start:w.end]), mask, list(t.behaviour_logprobs[w.start:w.end]),
                              advantage, weight, temperature, top_p, top_k, w.position_offset, t.imported))
    return samples


def pack(samples: list[Sample], token_budget: int) -> list[list[Sample]]:
    """The padded layout's micro-batches (samples × longest <= token_budget): greedy in order (the order is the
    table's, so a cursor stays meaningful); one sample at least per batch."""
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
    """The padded layout: one right-padded row per sample."""
    return collate_rows([[sample] for sample in samples])


def collate_rows(rows: list[list[Sample]]) -> MicroBatch:
    """Each row's samples end to end, right-padded to the widest row; positions restart at every sample (its
    own position_offset) and sequence_ids tell the scorer where attention must stop (trainer/step/packing.py)."""
    width = max(sum(len(sample.token_ids) for sample in row) for row in rows)
    shape = (len(rows), width)
    token_ids, attention = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
    mask, behaviour, advantages = torch.zeros(shape), torch.zeros(shape), torch.zeros(shape)
    temperature, top_p = torch.ones(shape), torch.ones(shape)
    top_k = torch.zeros(shape, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    sequence_ids = torch.full(shape, -1, dtype=torch.long)
    supervised = torch.zeros(shape, dtype=torch.bool)
    context_cut = torch.zeros(shape, dtype=torch.bool)
    for r, row in enumerate(rows):
        start = 0
        for index, sample in enumerate(row):
            span = slice(start, start + len(sample.token_ids))
            token_ids[r, span] = torch.tensor(sample.token_ids)
            attention[r, span] = 1
            sample_mask = torch.tensor(sample.loss_mask, dtype=torch.float) * sample.weight
            sample_mask[0] = 0.0  # token 0 of a sample has no prefix to be predicted from
            mask[r, span] = sample_mask
            behaviour[r, span] = torch.tensor(sample.behaviour_logprobs)
            advantages[r, span] = sample.advantage
            if sample.temperature:
                temperature[r, span] = torch.tensor(sample.temperature)
                top_p[r, span] = torch.tensor(sample.top_p)
                top_k[r, span] = torch.tensor(sample.top_k)
            positions[r, span] = torch.arange(len(sample.token_ids)) + sample.position_offset
            sequence_ids[r, span] = index
            supervised[r, span] = sample.supervised
            context_cut[r, span] = sample.position_offset > 0 and not sample.supervised
            start = span.stop
    packed = any(len(row) > 1 for row in rows)
    shifted = packed or any(sample.position_offset for row in rows for sample in row)
    return MicroBatch(
        token_ids=token_ids,
        attention_mask=attention,
        loss_mask=mask,
        behaviour_logprobs=behaviour,
        advantages=advantages,
        real_tokens=int(attention.sum()),
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        supervised=supervised,
        position_ids=positions if shifted else None,
        sequence_ids=sequence_ids if packed else None,
        context_cut=context_cut if bool(context_cut.any()) else None,
    )


def score_batch(model, batch: MicroBatch, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                all_tokens: bool = False) -> ScoredTokens:
    """The batch's loss-masked tokens (every token with all_tokens) scored under the processing each was sampled
    with (trainer/gate/scoring.py); the others get logp 0. Tokens whose window cut their context
    (MicroBatch.context_cut) are unscorable too."""
    scored = score_tokens(model, batch.token_ids, batch.attention_mask, batch.sampling, batch.position_ids,
                          chunk_tokens, sequence_ids=batch.sequence_ids,
                          wanted=None if all_tokens else batch.loss_mask > 0)
    if batch.context_cut is None:
        return scored
    return ScoredTokens(scored.logp, scored.unscorable | batch.context_cut)


def score_batch_pair(candidate, champion, batch: MicroBatch,
                     chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> ScoredPair:
    """score_batch under both models and their KL on the loss-masked tokens, one forward per model (the gate)."""
    pair = score_pair(candidate, champion, batch.token_ids, batch.attention_mask, batch.sampling, batch.position_ids,
                      chunk_tokens, sequence_ids=batch.sequence_ids, wanted=batch.loss_mask > 0)
    if batch.context_cut is None:
        return pair
    cut = lambda scored: ScoredTokens(scored.logp, scored.unscorable | batch.context_cut)  # noqa: E731
    return ScoredPair(cut(pair.candidate), cut(pair.champion), pair.kl)


def token_logprobs(model, token_ids: torch.Tensor, attention_mask: torch.Tensor,
                   sampling: TokenSampling | None = None) -> torch.Tensor:
    """(B, T) log π(token_t | tokens_<t); column 0 is 0 (token 0 has no prefix). sampling None: temperature 1
    without truncation; otherwise the processed distribution (see score_batch for the unscorable flags)."""
    return score_tokens(model, token_ids, attention_mask, sampling).logp
