"""Each loss variant against a hand-computed token: value and gradient with respect to log π."""

from __future__ import annotations

import math

import pytest
import torch

from liverl.config.trainer import LossConfig
from trainer.step.losses import behaviour_kl, reference_kl, token_losses


def _one_token(kind: str, ratio: float, advantage: float, **overrides):
    """A single token with π/π_behaviour = ratio and log π = log(0.6); returns (loss, dloss/dlogp, clipped)."""
    logp = torch.tensor([[math.log(0.6)]], requires_grad=True)
    behaviour = torch.tensor([[math.log(0.6 / ratio)]])
    result = token_losses(logp, behaviour, torch.tensor([advantage]), LossConfig(kind=kind, **overrides))
    result.loss.sum().backward()
    return result.loss.item(), logp.grad.item(), result.clipped.item()


@pytest.mark.parametrize(
    "ratio, advantage, loss, grad, clipped",
    [
        (1.2, 1.0, -1.2, -1.2, 0.0),  # inside the clip range: -r·A, gradient -r·A
        (1.5, 1.0, -1.28, 0.0, 1.0),  # above 1 + clip_high with A > 0: clipped, no gradient
        (0.5, -1.0, 0.8, 0.0, 1.0),  # below 1 - clip_low with A < 0: -min(-0.5, -0.8) = 0.8, clipped
        (1.5, -1.0, 1.5, 1.5, 0.0),  # A < 0 and r high: the unclipped (pessimistic) term is kept
    ],
)
def test_ppo_clip(ratio, advantage, loss, grad, clipped):
    assert _one_token("ppo", ratio, advantage) == pytest.approx((loss, grad, clipped), abs=1e-5)


def test_truncated_importance_sampling():
    # r = 3 is truncated to the cap 2: value -2·A, gradient -min(r, C)·A = -2 (the weight is a constant).
    assert _one_token("tis", 3.0, 1.0, tis_cap=2.0) == pytest.approx((-2.0, -2.0, 1.0), abs=1e-5)
    assert _one_token("tis", 1.2, -0.5, tis_cap=2.0) == pytest.approx((0.6, 0.6, 0.0), abs=1e-5)


def test_kimi_log_ratio_mask_and_squared_penalty():
    tau = 0.01
    inside = math.log(1.2)  # within [α, β] = [-1, 1]: -r·A + τ·(log r)², gradient -r·A + 2τ·log r
    expected = (-1.2 + tau * inside**2, -1.2 + 2 * tau * inside, 0.0)
    assert _one_token("kimi", 1.2, 1.0, kimi_tau=tau) == pytest.approx(expected, abs=1e-5)
    outside = math.log(4.0)  # above β = 1: no policy-gradient term, only the penalty
    expected = (tau * outside**2, 2 * tau * outside, 1.0)
    assert _one_token("kimi", 4.0, 1.0, kimi_tau=tau) == pytest.approx(expected, abs=1e-5)


def test_cispo_clipped_stop_gradient_weight():
    # weight = sg(clip(1.5, 0.8, 1.28)) = 1.28: value -1.28·A·log π, gradient -1.28·A (never zero).
    expected = (-1.28 * math.log(0.6), -1.28, 1.0)
    assert _one_token("cispo", 1.5, 1.0) == pytest.approx(expected, abs=1e-5)
    assert _one_token("cispo", 1.1, -2.0) == pytest.approx((2.2 * math.log(0.6), 2.2, 0.0), abs=1e-5)


def test_on_policy_tokens_have_zero_behaviour_kl():
    logp = torch.tensor([[-1.0, -2.0]])
    assert behaviour_kl(logp, logp).abs().max().item() == 0.0
    assert behaviour_kl(logp, logp - 0.5).min().item() > 0.0


@pytest.mark.parametrize("kind", ["ppo", "tis", "kimi", "cispo"])
def test_huge_log_ratios_and_masked_positions_never_poison_the_step(kind):
    # Token 1: trained, |log r| = 300. Token 2: masked, behaviour -inf (a corrupt record). Token 3: masked, NaN.
    logp = torch.tensor([[-1.0, -301.0, -1.0, -1.0]], requires_grad=True)
    behaviour = torch.tensor([[-1.0, -1.0, -float("inf"), float("nan")]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    result = token_losses(logp, behaviour, torch.tensor([-1.0]), LossConfig(kind=kind), mask)
    (result.loss * mask).sum().backward()
    assert torch.isfinite(result.loss).all() and torch.isfinite(logp.grad).all()
    assert result.loss[0, 2:].tolist() == [0.0, 0.0] and logp.grad[0, 2:].tolist() == [0.0, 0.0]
    assert result.ratio[0, 0].item() == pytest.approx(1.0)  # the healthy token is untouched


def test_tis_keeps_its_exact_gradient_beyond_the_clamp():
    # log r = +300: weight min(r, C) = 2, value -2·A, gradient -2·A, with no exp of e^300 anywhere.
    logp = torch.tensor([[-1.0]], requires_grad=True)
    result = token_losses(logp, torch.tensor([[-301.0]]), torch.tensor([1.0]), LossConfig(kind="tis"))
    result.loss.sum().backward()
    assert (result.loss.item(), logp.grad.item(), result.clipped.item()) == pytest.approx((-2.0, -2.0, 1.0))


def test_kl_to_reference_adds_the_ratio_weighted_k3_term():
    # log π = log 0.6, log π_ref = log 0.3: d = log 0.5; k3 = 0.5 - log 0.5 - 1 = 0.19315. On-policy (r = 1):
    # d(r·k3)/d logπ = r·k3 + r·(1 - π_ref/π) = k3 + 0.5.
    beta = 0.1
    logp = torch.tensor([[math.log(0.6)]], requires_grad=True)
    behaviour = torch.tensor([[math.log(0.6)]])  # on-policy: ppo value -A = -1, gradient -1
    config = LossConfig(kind="ppo", kl_to_reference=beta)
    result = token_losses(logp, behaviour, torch.tensor([1.0]), config, reference_logp=torch.tensor([[math.log(0.3)]]))
    result.loss.sum().backward()
    k3 = 0.5 - math.log(0.5) - 1
    assert result.loss.item() == pytest.approx(-1.0 + beta * k3, abs=1e-6)
    assert logp.grad.item() == pytest.approx(-1.0 + beta * (k3 + 0.5), abs=1e-6)
    with pytest.raises(ValueError, match="reference"):
        token_losses(logp, behaviour, torch.tensor([1.0]), config)
    off = token_losses(logp, behaviour, torch.tensor([1.0]), LossConfig(kind="ppo"), reference_logp=logp.detach() - 5)
    assert off.loss.item() == pytest.approx(-1.0)  # default off: the reference is ignored


def test_reference_kl_has_the_exact_gradient_of_kl_policy_to_reference():
    """On a 5-token vocabulary, the behaviour-weighted expectation of the per-token term is KL(π_θ || π_ref) as a
    function of θ: its value and its autograd gradient equal the KL's and the KL's analytic gradient."""
    torch.manual_seed(3)
    logits = torch.randn(5, dtype=torch.float64, requires_grad=True)
    reference = torch.randn(5, dtype=torch.float64).log_softmax(-1)
    behaviour = torch.randn(5, dtype=torch.float64).log_softmax(-1)  # serving's policy: neither of the two
    logp = logits.log_softmax(-1)
    expectation = (behaviour.exp() * reference_kl(logp[None], reference[None], behaviour[None])[0]).sum()
    (gradient,) = torch.autograd.grad(expectation, logits)
    p = logp.detach().exp()
    kl = (p * (logp.detach() - reference)).sum()
    analytic = p * (logp.detach() - reference - kl)  # d KL(π_θ || π_ref) / d logits
    assert expectation.item() == pytest.approx(kl.item(), rel=1e-12)
    assert torch.allclose(gradient, analytic, atol=1e-12)
    reverse = p * (1 - reference.exp() / p)  # what k3 without the ratio follows, on-policy: ∇KL(π_ref || π_θ)
    assert not torch.allclose(analytic, reverse, atol=1e-3)
