"""Per-token off-policy policy-gradient losses against the behaviour (serving) logprobs.

Every variant returns the loss of each token; the caller averages over loss-masked tokens, so the
objective is token-level (long trajectories weigh by their tokens, as in DAPO). r = π_θ / π_behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from liverl.config.trainer import LossConfig


@dataclass(frozen=True)
class TokenLoss:
    loss: torch.Tensor  # (B, T) per-token loss, not yet masked
    ratio: torch.Tensor  # (B, T) r = exp(logp - behaviour), detached
    clipped: torch.Tensor  # (B, T) 1.0 where the variant clipped, truncated or masked the token


def token_losses(
    logp: torch.Tensor,  # (B, T) log π_θ(token), with gradient
    behaviour_logp: torch.Tensor,  # (B, T) log π_behaviour(token) captured by serving
    advantages: torch.Tensor,  # (B,) one advantage per trajectory, broadcast over its tokens
    config: LossConfig,
) -> TokenLoss:
    log_ratio = logp - behaviour_logp
    ratio = torch.exp(log_ratio)
    adv = advantages[:, None].to(logp.dtype)
    low, high = 1.0 - config.clip_low, 1.0 + config.clip_high
    if config.kind == "ppo":
        unclipped = ratio * adv
        clipped_ratio = ratio.clamp(low, high)
        loss = -torch.minimum(unclipped, clipped_ratio * adv)
        clipped = (clipped_ratio * adv < unclipped).float()
    elif config.kind == "tis":
        # Value -min(r, C)·A; gradient min(r, C)·A·∇log π: the weight is a constant, r carries the gradient.
        truncated = ratio.clamp(max=config.tis_cap)
        loss = -(truncated / ratio).detach() * ratio * adv
        clipped = (ratio > config.tis_cap).float()
    elif config.kind == "kimi":
        inside = ((log_ratio >= config.kimi_alpha) & (log_ratio <= config.kimi_beta)).float().detach()
        loss = -inside * ratio * adv + config.kimi_tau * log_ratio.pow(2)
        clipped = 1.0 - inside
    elif config.kind == "cispo":
        # The IS weight is clipped and stop-gradient, so every token keeps a gradient (none is clipped away).
        weight = ratio.clamp(low, high).detach()
        loss = -weight * adv * logp
        clipped = ((ratio < low) | (ratio > high)).float()
    else:  # the config's Literal makes this unreachable unless a new kind is added without a formula
        raise ValueError(f"unknown loss kind {config.kind!r}; use ppo, tis, kimi or cispo")
    return TokenLoss(loss=loss, ratio=ratio.detach(), clipped=clipped.detach())


def behaviour_kl(logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """(B, T) k3 estimate of KL(π_behaviour || π_θ) on tokens sampled by the behaviour policy: r - 1 - log r."""
    log_ratio = (logp - behaviour_logp).detach()
    return torch.exp(log_ratio) - 1.0 - log_ratio
