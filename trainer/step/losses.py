"""Per-token off-policy policy-gradient losses against the behaviour (serving) logprobs.

Every variant returns the loss of each token; the caller averages over loss-masked tokens, so the
objective is token-level (long trajectories weigh by their tokens, as in DAPO). r = π_θ / π_behaviour.

Numerics: log-ratios are zeroed on positions outside `mask` and clamped to ±LOG_RATIO_LIMIT before any exp,
so a token with |log r| in the hundreds (a corrupt behaviour logprob, a token the trainer cannot score) or
a masked position can never turn the step's loss or gradient into inf or NaN. Past the clamp the ratio's
gradient is 0 (such a token is clipped or masked by every variant anyway), except TIS, whose gradient
min(r, C)·A·∇log π stays exact: it is taken through log π directly, never through exp.

Imported trajectories (`liverl import`: a team's existing traces, origin "import:<format>") have no behaviour
logprobs (the row holds 0) and no served version, so no ratio exists for them. Their tokens (`supervised`) get
reward-weighted supervised fine-tuning instead: loss -w·log π, no ratio, no clip, never counted as clipped. The
rule for w (trainer/step/advantages.py `imported_weight`): LossConfig.import_weight when the trajectory's mixed reward is at least
LossConfig.import_min_reward, else 0, and a trajectory of weight 0 is left out of the step altogether (by default:
learn from successful imported sessions only, do not push away from failed ones, whose tokens came from another
policy). The caller passes w in `advantages` on those tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from liverl.config.trainer import LossConfig

LOG_RATIO_LIMIT = 20.0  # |log r| beyond this is clamped before exp (e^20 ≈ 5e8)


@dataclass(frozen=True)
class TokenLoss:
    loss: torch.Tensor  # (B, T) per-token loss, not yet masked; 0 on positions outside the mask
    ratio: torch.Tensor  # (B, T) r = exp(clamped logp - behaviour), detached; 1 outside the mask
    clipped: torch.Tensor  # (B, T) 1.0 where the variant clipped, truncated or masked the token


def log_ratio(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) log π_θ - log π_behaviour, 0 outside mask (bool or weights > 0), non-finite values as ±limit.
    Not clamped: the callers clamp where they exponentiate."""
    raw = logp - behaviour_logp
    if mask is not None:
        raw = torch.where(mask > 0, raw, torch.zeros_like(raw))
    return torch.nan_to_num(raw, nan=0.0, posinf=LOG_RATIO_LIMIT, neginf=-LOG_RATIO_LIMIT)


def token_losses(
    logp: torch.Tensor,  # (B, T) log π_θ(token), with gradient
    behaviour_logp: torch.Tensor,  # (B, T) log π_behaviour(token) captured by serving
    advantages: torch.Tensor,  # (B, T) per token, or (B,) one per row broadcast over its tokens
    config: LossConfig,
    mask: torch.Tensor | None = None,  # (B, T) positions that carry a loss (bool or weights); None: all
    reference_logp: torch.Tensor | None = None,  # (B, T) log π_ref(token), needed when kl_to_reference > 0
    supervised: torch.Tensor | None = None,  # (B, T) bool: imported tokens (advantages hold w there); None: none
) -> TokenLoss:
    ratio_mask = mask  # no ratio is ever formed against an imported token's missing logprob: log r is 0 there
    if supervised is not None:
        ratio_mask = ~supervised if mask is None else (mask > 0) & ~supervised
    raw = log_ratio(logp, behaviour_logp, ratio_mask)
    clamped = raw.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(clamped)
    adv = (advantages[:, None] if advantages.dim() == 1 else advantages).to(logp.dtype)
    low, high = 1.0 - config.clip_low, 1.0 + config.clip_high
    if config.kind == "ppo":
        unclipped = ratio * adv
        clipped_ratio = ratio.clamp(low, high)
        loss = -torch.minimum(unclipped, clipped_ratio * adv)
        clipped = (clipped_ratio * adv < unclipped).float()
    elif config.kind == "tis":
        # Value -min(r, C)·A; gradient min(r, C)·A·∇log π: the weight is a constant; exp(x - sg(x)) is 1
        # with gradient ∇x, so the gradient needs no exp of the (possibly huge) ratio.
        log_cap = math.log(config.tis_cap)
        weight = torch.exp(clamped.clamp(max=log_cap)).detach()
        loss = -weight * adv * torch.exp(raw - raw.detach())
        clipped = (raw > log_cap).float()
    elif config.kind == "kimi":
        inside = ((raw >= config.kimi_alpha) & (raw <= config.kimi_beta)).float().detach()
        # Inside [α, β] the clamp is the identity; outside, the term is masked and must stay finite.
        inside_ratio = torch.exp(raw.clamp(config.kimi_alpha, config.kimi_beta))
        loss = -inside * inside_ratio * adv + config.kimi_tau * clamped.pow(2)
        clipped = 1.0 - inside
    elif config.kind == "cispo":
        # The IS weight is clipped and stop-gradient, so every token keeps a gradient (none is clipped away).
        weight = ratio.clamp(low, high).detach()
        masked_logp = logp if mask is None else torch.where(mask > 0, logp, torch.zeros_like(logp))
        loss = -weight * adv * masked_logp
        clipped = ((ratio < low) | (ratio > high)).float()
    else:  # the config's Literal makes this unreachable unless a new kind is added without a formula
        raise ValueError(f"unknown loss kind {config.kind!r}; use ppo, tis, kimi or cispo")
    if supervised is not None:
        # Every variant's term is finite there (log r is 0), so torch.where passes no NaN or inf gradient.
        loss = torch.where(supervised, -adv * logp, loss)
        clipped = torch.where(supervised, torch.zeros_like(clipped), clipped)
    if config.kl_to_reference > 0:
        if reference_logp is None:
            raise ValueError("loss.kl_to_reference > 0 needs reference_logp: score the tokens with the frozen "
                             "reference policy too, or set trainer.loss.kl_to_reference = 0")
        loss = loss + config.kl_to_reference * reference_kl(logp, reference_logp, behaviour_logp, ratio_mask)
    if mask is not None:
        loss = torch.where(mask > 0, loss, torch.zeros_like(loss))
    return TokenLoss(loss=loss, ratio=ratio.detach(), clipped=clipped.detach())


def reference_kl(logp: torch.Tensor, reference_logp: torch.Tensor, behaviour_logp: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) per-token estimate of KL(π_θ || π_ref) on tokens sampled by the behaviour policy μ, with gradient:
    r · k3, with r = π_θ / μ and k3 = e^d - d - 1, d = log π_ref - log π_θ (both with gradient).

    Why the ratio: k3 alone, on tokens drawn from π_θ, has expectation KL(π_θ || π_ref) but gradient
    E_π_θ[(1 - π_ref/π_θ) ∇log π_θ] = ∇KL(π_ref || π_θ), the other direction; and the tokens come from μ, not π_θ.
    E_μ[r · k3] = Σ π_θ · k3 = KL(π_θ || π_ref) exactly, as a function of θ, so its gradient is
    E_μ[r (log π_θ - log π_ref) ∇log π_θ] = ∇KL(π_θ || π_ref). The term is 0 where mask is 0 (padding, and imported
    tokens: no behaviour distribution to weigh them by). Log-ratios are clamped to ±LOG_RATIO_LIMIT before exp."""
    log_r = log_ratio(logp, behaviour_logp, mask).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    d = log_ratio(reference_logp, logp, mask).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(log_r) * (torch.exp(d) - d - 1.0)


def behaviour_kl(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) k3 estimate of KL(π_behaviour || π_θ) on tokens sampled by the behaviour policy: r - 1 - log r."""
    d = log_ratio(logp, behaviour_logp, mask).detach().clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(d) - 1.0 - d

