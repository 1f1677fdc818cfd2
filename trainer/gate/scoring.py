"""Score tokens under the distribution serving sampled them from: temperature, then top-k, then top-p.

Serving records vLLM's *processed* logprobs (`logprobs_mode="processed_logprobs"`): the log-probability of
each sampled token after vLLM's sampler divided the logits by the temperature and truncated them to the
top-k, then top-p, set (renormalised). A trainer that scores the same token at temperature 1 without
truncation compares two different distributions, and the importance ratio is wrong even with identical
weights. Here every token is scored exactly as vLLM 0.32's sampler processes it
(vllm/v1/sample/sampler.py and ops/topk_topp_sampler.py, native and CPU paths):

0. the temperature the engine used: vLLM's SamplingParams raises any temperature in (0, 0.01) to 0.01, so a
   recorded 0.005 is scored at 0.01; NaN means the call's sampling parameters are unknown;
1. greedy calls (temperature 0): vLLM records the untruncated temperature-1 log-softmax;
2. logits / temperature (float32);
3. top-k (k in (0, vocab)): keep every logit >= the k-th largest (ties at the threshold are kept);
4. top-p (p < 1): sort ascending, softmax of the top-k-truncated logits, cumulative sum; drop the tokens whose
   cumulative sum is <= 1 - p, always keeping the largest; the survivors are renormalised by the log-softmax.

Ties: steps 3 and 4 are the CPU (native PyTorch) rule. On CUDA with Triton, vLLM keeps exactly k tokens when
logits tie at the top-k threshold, and part of a tied group at the top-p boundary, so the truncated set (and
every probability of that step) depends on the kernel. `ties="unscorable"` (the default) marks a step with such
a tie unscorable, right under either engine; `ties="keep"` reproduces the CPU rule exactly.

The rule for tokens that cannot be corrected (`ScoredTokens.unscorable`): a greedy call's token (the behaviour
policy is a point mass: no ratio means anything), a token whose sampling is unknown (NaN temperature: the
behaviour distribution is unknown), a token outside the trainer's own truncated set (the trainer's processed
probability is 0, typically a boundary token that rounding put on the other side), and, under
`ties="unscorable"`, a step with a tie at the top-k threshold or the top-p boundary. Their `logp` is still finite
(greedy and unknown: temperature 1 untruncated; the others: tempered, untruncated) so the caller decides: the
trainer leaves them out of every loss term unless `LossConfig.exclude_unscorable` is false.

Memory: the model's last hidden states are projected to the vocabulary `chunk_tokens` positions at a time
(under activation checkpointing when gradients are on), so the extra memory is O(tokens x hidden +
chunk_tokens x vocab) instead of O(tokens x vocab). Models whose output head is not a plain projection of the
base model's hidden states fall back to one full forward (logits in memory) with chunked processing. The hidden
states come from calling the model (or its DeepSpeed engine) itself with output_hidden_states, never its base
model alone: ZeRO-3 accumulates a micro-batch's gradient only when the engine's forward ran for it.

Packed rows (trainer/step/packing.py): `sequence_ids` (B, T) says which sequence of its row each token belongs to
(-1 padding); attention is then block-diagonal causal (a 4D additive mask, which GPT-2 and Llama take as is
under eager and sdpa attention), and each sequence's first token is not predicted, like column 0.

Public functions:
    score_tokens(model, token_ids, attention_mask, sampling=None, position_ids=None, chunk_tokens=512,
                 sequence_ids=None, ties="unscorable", wanted=None)
        -> ScoredTokens(logp (B, T), unscorable (B, T) bool); column 0, sequence starts and padding are 0 / False;
        with wanted (B, T) bool, so are the tokens not wanted (a training step wants its loss-masked tokens only).
    score_pair(candidate, champion, token_ids, attention_mask, sampling=None, position_ids=None, chunk_tokens=512,
               sequence_ids=None, ties="unscorable", wanted=None)
        -> ScoredPair(candidate, champion: ScoredTokens as score_tokens gives them; kl (B, T): KL(candidate ||
        champion) of the full temperature-1 next-token distributions that predict token t, 0 where nothing is
        scored), from one forward per model; for the promotion gate, call under torch.no_grad().
    block_causal_mask(sequence_ids (B, T), dtype) -> (B, 1, T, T) additive mask.
    processed_logprobs(logits (N, V), targets (N,), temperature (N,), top_p (N,), top_k (N,), ties="unscorable")
        -> (logp (N,), unscorable (N,) bool): the per-token rule above on a block of logits.
    engine_temperature(recorded) -> the temperature vLLM samples with (0 greedy, NaN unknown).
    unscorable_by_sampling(sampling, where) -> (B, T) bool flags that need no forward, or None.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

GREEDY_TEMPERATURE = 1e-5  # vLLM's _SAMPLING_EPS: below it a call is greedy
MIN_TEMPERATURE = 1e-2  # vLLM's _MAX_TEMP: SamplingParams raises any temperature in (0, this) to it
TieRule = Literal["unscorable", "keep"]
DEFAULT_CHUNK_TOKENS = 512


@dataclass(frozen=True)
class TokenSampling:
    """How each token was sampled, aligned with token_ids (the span's SamplingParams, repeated per token)."""

    temperature: torch.Tensor  # (B, T) float; 0 greedy, NaN unknown (the call did not record its sampling)
    top_p: torch.Tensor  # (B, T) float; 1 no nucleus truncation
    top_k: torch.Tensor  # (B, T) long; <= 0 or >= vocab no top-k truncation


@dataclass(frozen=True)
class ScoredTokens:
    logp: torch.Tensor  # (B, T) log π(token_t | tokens_<t) under the processing; finite; column 0 is 0
    unscorable: torch.Tensor  # (B, T) bool: greedy, or outside the truncated set (see the module docstring)


def engine_temperature(recorded: torch.Tensor) -> torch.Tensor:
    """The temperature vLLM sampled with: a positive one below MIN_TEMPERATURE was raised to it; 0 (greedy) and
    NaN (unknown) pass through."""
    return torch.where(recorded > 0, recorded.clamp(min=MIN_TEMPERATURE), recorded)


def unscorable_by_sampling(sampling: TokenSampling, where: torch.Tensor) -> torch.Tensor | None:
    """(B, T) unscorable flags of the tokens `where` (bool), when they follow from the sampling alone (greedy or
    unknown); None when some of those tokens were truncated (top-k or top-p), whose flags need the logits."""
    truncated = ((sampling.top_k > 0) | (sampling.top_p < 1.0)) & where
    temperature = engine_temperature(sampling.temperature.float())
    if bool((truncated & (temperature >= GREEDY_TEMPERATURE)).any()):
        return None
    return ((temperature < GREEDY_TEMPERATURE) | torch.isnan(temperature)) & where


def processed_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
    top_k: torch.Tensor, ties: TieRule = "unscorable",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) log-probabilities of targets under vLLM's processing of (N, V) logits, and (N,) unscorable."""
    logits = logits.float()
    vocab = logits.shape[-1]
    temperature = engine_temperature(temperature.float())
    unknown = torch.isnan(temperature)
    greedy = (temperature < GREEDY_TEMPERATURE) | unknown  # both scored at temperature 1, untruncated
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    untruncated = scaled.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    k = torch.where(greedy | (top_k <= 0) | (top_k >= vocab), torch.full_like(top_k, vocab), top_k)
    p = torch.where(greedy, torch.ones_like(top_p), top_p).float()
    truncated, tied = scaled, torch.zeros_like(greedy)
    if bool((k < vocab).any()):
        truncated, tied_k = _top_k(truncated, k)
        tied = tied | tied_k
    if bool((p < 1.0).any()):
        truncated, tied_p = _top_p(truncated, p)
        tied = tied | tied_p
    processed = truncated.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    outside = torch.isneginf(processed)
    unscorable = outside | greedy
    if ties == "unscorable":
        unscorable = unscorable | tied
    # torch.where, not arithmetic: the -inf branch gets a zero gradient instead of poisoning it with NaN.
    return torch.where(outside, untruncated, processed), unscorable


def _top_k(logits: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's apply_top_k_only: mask logits below the k-th largest of their row; rows with k == vocab untouched.
    Also (N,) bool: more than k logits reach the threshold (a tie a Triton kernel breaks by keeping k)."""
    vocab = logits.shape[-1]
    untouched = k >= vocab
    k = k.masked_fill(untouched, 1)
    threshold = logits.topk(int(k.max()), dim=-1).values.gather(-1, (k - 1)[:, None].long())
    threshold = threshold.masked_fill(untouched[:, None], -float("inf"))
    reaching = logits >= threshold
    tied = (reaching.sum(-1) > k) & ~untouched
    return logits.masked_fill(~reaching, -float("inf")), tied


def _top_p(logits: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's apply_top_k_top_p_pytorch top-p half, on the rows with p < 1 (other rows are left untouched).
    Also (N,) bool: the last dropped and the first kept logit are equal (a tied group split by the boundary)."""
    rows = p < 1.0
    sorted_logits, order = logits[rows].sort(dim=-1, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - p[rows][:, None]
    drop[:, -1] = False  # at least one token survives
    first_kept = drop.sum(-1, keepdim=True)  # drop is a prefix of the ascending order
    last_dropped = (first_kept - 1).clamp(min=0)
    split = (first_kept > 0) & (sorted_logits.gather(-1, last_dropped) == sorted_logits.gather(-1, first_kept))
    tied = torch.zeros_like(rows)
    tied[rows] = split.squeeze(-1) & torch.isfinite(sorted_logits.gather(-1, first_kept)).squeeze(-1)
    sorted_logits = sorted_logits.masked_fill(drop, -float("inf"))
    out = logits.clone()
    out[rows] = torch.empty_like(sorted_logits).scatter_(-1, order, sorted_logits)
    return out, tied


def score_tokens(
    model, token_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: TokenSampling | None = None,
    position_ids: torch.Tensor | None = None, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    sequence_ids: torch.Tensor | None = None, ties: TieRule = "unscorable", wanted: torch.Tensor | None = None,
) -> ScoredTokens:
    """Score every real token t >= 1 of a right-padded (B, T) batch; sampling None: temperature 1, untruncated.
    wanted: (B, T) bool, score only these tokens (the others get logp 0, scorable)."""
    rows, width = token_ids.shape
    predicted = _restricted(_predicted(attention_mask, sequence_ids), wanted)  # (B, T-1) positions to predict
    targets = token_ids[:, 1:][predicted]  # (N,)
    temperature, top_p, top_k = _sampling_of(sampling, token_ids, predicted, targets)
    logp, unscorable = [], []
    for block in _blocks(model, token_ids, attention_mask, position_ids, sequence_ids, predicted, chunk_tokens):
        chunk, project = block
        lp, bad = _project_and_score(project, chunk.inputs, targets[chunk.rows], temperature[chunk.rows],
                                     top_p[chunk.rows], top_k[chunk.rows], ties)
        logp.append(lp)
        unscorable.append(bad)
    out_logp = torch.zeros(rows, width - 1, device=token_ids.device, dtype=torch.float32)
    out_bad = torch.zeros(rows, width - 1, device=token_ids.device, dtype=torch.bool)
    if logp:
        out_logp = out_logp.masked_scatter(predicted, torch.cat(logp))
        out_bad = out_bad.masked_scatter(predicted, torch.cat(unscorable))
    pad = torch.nn.functional.pad
    return ScoredTokens(logp=pad(out_logp, (1, 0)), unscorable=pad(out_bad, (1, 0)))


@dataclass(frozen=True)
class ScoredPair:
    candidate: ScoredTokens
    champion: ScoredTokens
    kl: torch.Tensor  # (B, T) KL(candidate || champion) at temperature 1, untruncated; column 0 is 0


def score_pair(
    candidate, champion, token_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: TokenSampling | None = None,
    position_ids: torch.Tensor | None = None, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    sequence_ids: torch.Tensor | None = None, ties: TieRule = "unscorable", wanted: torch.Tensor | None = None,
) -> ScoredPair:
    """score_tokens under both models and the KL between their full next-token distributions, from one forward
    and one vocabulary projection per model and chunk (the promotion gate's evaluation; call under no_grad)."""
    rows, width = token_ids.shape
    predicted = _restricted(_predicted(attention_mask, sequence_ids), wanted)
    targets = token_ids[:, 1:][predicted]
    temperature, top_p, top_k = _sampling_of(sampling, token_ids, predicted, targets)
    pieces: dict[str, list[torch.Tensor]] = {"cand_logp": [], "cand_bad": [], "champ_logp": [], "champ_bad": [],
                                             "kl": []}
    layout = (token_ids, attention_mask, position_ids, sequence_ids, predicted, chunk_tokens)
    for (cand_chunk, cand_project), (champ_chunk, champ_project) in zip(_blocks(candidate, *layout),
                                                                        _blocks(champion, *layout)):
        where = cand_chunk.rows
        logits = {"cand": cand_project(cand_chunk.inputs), "champ": champ_project(champ_chunk.inputs)}
        for name, block in logits.items():
            logp, bad = processed_logprobs(block, targets[where], temperature[where], top_p[where], top_k[where], ties)
            pieces[f"{name}_logp"].append(logp)
            pieces[f"{name}_bad"].append(bad)
        cand, champ = (block.float().log_softmax(-1) for block in logits.values())
        pieces["kl"].append((cand.exp() * (cand - champ)).sum(-1))

    def spread(name: str, dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros(rows, width - 1, device=token_ids.device, dtype=dtype)
        if pieces[name]:
            out = out.masked_scatter(predicted, torch.cat(pieces[name]))
        return torch.nn.functional.pad(out, (1, 0))

    return ScoredPair(
        candidate=ScoredTokens(spread("cand_logp", torch.float32), spread("cand_bad", torch.bool)),
        champion=ScoredTokens(spread("champ_logp", torch.float32), spread("champ_bad", torch.bool)),
        kl=spread("kl", torch.float32))


def _sampling_of(sampling: TokenSampling | None, token_ids: torch.Tensor, predicted: torch.Tensor,
                 targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N,) temperature, top_p, top_k of the predicted tokens; None: temperature 1, untruncated."""
    if sampling is None:
        temperature = torch.ones(targets.shape, device=token_ids.device)
        return temperature, temperature, torch.zeros_like(targets)
    return tuple(x[:, 1:][predicted] for x in (sampling.temperature, sampling.top_p, sampling.top_k))


@dataclass(frozen=True)
class _Chunk:
    rows: slice  # which of the N predicted positions this chunk holds
    inputs: torch.Tensor  # (n, H) hidden states, or (n, V) logits on the fallback path


def block_causal_mask(sequence_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive mask from (B, T) sequence ids: token i sees token j <= i of its own sequence only.
    Padding (-1) sees earlier padding, never a real token; every token sees itself, so no row is empty, and
    finfo.min rather than -inf keeps the softmax finite in eager and sdpa alike."""
    width = sequence_ids.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=sequence_ids.device).tril()
    allowed = (sequence_ids[:, :, None] == sequence_ids[:, None, :]) & causal  # (B, T, T)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=sequence_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def _predicted(attention_mask: torch.Tensor, sequence_ids: torch.Tensor | None) -> torch.Tensor:
    """(B, T-1) bool: token t is real and predicted by token t-1 of its own sequence."""
    predicted = attention_mask[:, 1:].bool()
    if sequence_ids is not None:
        predicted = predicted & (sequence_ids[:, 1:] == sequence_ids[:, :-1])
    return predicted


def _blocks(model, token_ids, attention_mask, position_ids, sequence_ids, predicted, chunk_tokens):
    """Yield (chunk, project): project(chunk.inputs) gives that chunk's (n, V) logits."""
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the Hugging Face model
    base, head = _base_and_head(module)
    if sequence_ids is not None:  # packed rows: the model takes a prepared 4D mask as is
        attention_mask = block_causal_mask(sequence_ids, _dtype(module))
    kwargs = {"input_ids": token_ids, "attention_mask": attention_mask}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    if base is None:
        inputs, project = model(**kwargs).logits[:, :-1][predicted], _identity
    else:
        inputs, project = _last_hidden_state(model, module, kwargs)[:, :-1][predicted], head
    total = inputs.shape[0]
    for start in range(0, total, max(chunk_tokens, 1)):
        rows = slice(start, min(start + chunk_tokens, total))
        yield _Chunk(rows, inputs[rows]), project


def _last_hidden_state(model, module, kwargs: dict) -> torch.Tensor:
    """The base model's last hidden states, computed by calling `model` itself: a DeepSpeed engine's forward
    is where ZeRO-3 counts micro-batches, so a base model called around it makes every micro-batch's gradient
    overwrite the previous one's instead of adding to it. The head is asked for no position's logits (the
    chunks project the hidden states themselves), where the model's forward lets it choose."""
    extra = {"output_hidden_states": True, "return_dict": True}
    if "logits_to_keep" in inspect.signature(module.forward).parameters:
        extra["logits_to_keep"] = torch.zeros(0, dtype=torch.long, device=kwargs["input_ids"].device)
    return model(**kwargs, **extra).hidden_states[-1]


def _dtype(module) -> torch.dtype:
    """The dtype the attention scores are computed in (bf16 under DeepSpeed bf16): a float mask must match."""
    dtype = getattr(module, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _restricted(predicted: torch.Tensor, wanted: torch.Tensor | None) -> torch.Tensor:
    """The predicted positions (B, T-1) that are wanted. Projecting a position to the vocabulary (and sorting it
    for top-p) is most of a step's cost, and a step needs only its policy-sampled tokens: a prompt is often 4 times
    longer than its completion. One position stays when none is wanted, so a zero-weight micro-batch's loss still
    reaches the weights (DeepSpeed's backward and accumulation need a graph)."""
    if wanted is None:
        return predicted
    restricted = predicted & wanted[:, 1:].bool()
    if bool(restricted.any()) or not bool(predicted.any()):
        return restricted
    first = predicted.flatten().nonzero()[0]
    return restricted.flatten().index_fill(0, first, True).view_as(predicted)


def _base_and_head(module):
    """The base model and the output projection, when logits are exactly head(base(...).last_hidden_state)."""
    config = getattr(module, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None, None  # the forward post-processes its logits: only the full forward is exact
    get_head = getattr(module, "get_output_embeddings", None)
    head = get_head() if get_head else None
    base = getattr(module, "base_model", None)
    if head is None or base is None or base is module:
        return None, None
    return base, head


def _project_and_score(project, inputs, targets, temperature, top_p, top_k, ties):
    def run(x):
        return processed_logprobs(project(x), targets, temperature, top_p, top_k, ties)

    if torch.is_grad_enabled() and inputs.requires_grad:
        # Keep only the chunk's hidden states for backward; its (n, V) logits are recomputed there.
        return checkpoint(run, inputs, use_reentrant=False)
    return run(inputs)
