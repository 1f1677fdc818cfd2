"""The promotion gate: judge a candidate against the champion offline, on held-out trajectories.

Figures: RL loss of each model on the held-out trajectories (same loss and advantages as training),
mean per-token KL(candidate || champion), NLL of the served tokens (a regression check: a policy that
forgot how to produce what users got is broken), finite weights, and the reward-hacking drift report.
Only a pass moves `champion`; the decision and its figures are recorded on the version either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from liverl.config.trainer import GateConfig, LossConfig
from trainer.batching import collate, pack
from trainer.losses import token_losses
from trainer.step_builder import to_samples
from trainer.trajectory import Trajectory

EVAL_TOKEN_BUDGET = 8192


@dataclass(frozen=True)
class GateReport:
    decision: str  # "pass" | "fail"
    reasons: list[str]
    figures: dict[str, float | int | str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.decision == "pass"


@dataclass
class _Totals:
    tokens: float = 0.0
    kl: float = 0.0
    loss: dict[str, float] = field(default_factory=lambda: {"candidate": 0.0, "champion": 0.0})
    nll: dict[str, float] = field(default_factory=lambda: {"candidate": 0.0, "champion": 0.0})


@torch.no_grad()
def evaluate(
    candidate,
    champion,
    holdout: list[Trajectory],
    advantages: list[float],
    loss_config: LossConfig,
    config: GateConfig,
    max_seq_len: int,
    drift: dict | None,
) -> GateReport:
    """drift: a liverl.rewards DriftReport as a dict ({"ok", "flags", ...}), or None when that input is missing."""
    reasons: list[str] = []
    figures: dict = {"holdout_trajectories": len(holdout)}
    finite = all(torch.isfinite(p).all() for p in candidate.parameters())
    figures["finite_weights"] = int(finite)
    if not finite:
        reasons.append("candidate has non-finite weights")
    if len(holdout) < config.min_holdout:
        reasons.append(f"only {len(holdout)} held-out trajectories (min_holdout {config.min_holdout})")
    elif finite:
        totals = _score(candidate, champion, holdout, advantages, loss_config, max_seq_len)
        tokens = max(totals.tokens, 1.0)
        figures.update(
            holdout_tokens=int(totals.tokens),
            kl=totals.kl / tokens,
            candidate_loss=totals.loss["candidate"] / tokens,
            champion_loss=totals.loss["champion"] / tokens,
            candidate_nll=totals.nll["candidate"] / tokens,
            champion_nll=totals.nll["champion"] / tokens,
        )
        figures["loss_increase"] = figures["candidate_loss"] - figures["champion_loss"]
        figures["nll_increase"] = figures["candidate_nll"] - figures["champion_nll"]
        if not math.isfinite(figures["kl"]) or figures["kl"] > config.max_kl:
            reasons.append(f"KL to champion {figures['kl']:.4f} > max_kl {config.max_kl}")
        if figures["loss_increase"] > config.max_loss_increase:
            reasons.append(f"held-out loss up {figures['loss_increase']:.4f} > {config.max_loss_increase}")
        if figures["nll_increase"] > config.max_nll_increase:
            reasons.append(f"served-token NLL up {figures['nll_increase']:.4f} > {config.max_nll_increase}")
    if drift is None:
        figures["drift"] = "missing: no drift report was given"
    else:
        flags = list(drift.get("flags", []))
        figures["drift_flags"] = len(flags)
        if len(flags) > config.max_drift_alerts:
            reasons.append("reward-hacking drift: " + "; ".join(f"{f['figure']} {f['reason']}" for f in flags))
    return GateReport(decision="fail" if reasons else "pass", reasons=reasons, figures=figures)


def _score(candidate, champion, holdout, advantages, loss_config, max_seq_len) -> _Totals:
    totals = _Totals()
    samples = [  # one per segment, scored as its own sequence exactly as in training
        sample for t, advantage in zip(holdout, advantages) for sample in to_samples(t, 1.0, max_seq_len, advantage)
    ]
    for group in pack(samples, EVAL_TOKEN_BUDGET):
        batch = collate(group)
        mask = batch.loss_mask[:, 1:]  # (B, T-1) positions t >= 1, predicted from t-1
        logits = {}
        for name, model in (("candidate", candidate), ("champion", champion)):
            logits[name] = model(input_ids=batch.token_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
            logp = torch.nn.functional.pad(
                torch.log_softmax(logits[name], -1).gather(-1, batch.token_ids[:, 1:, None]).squeeze(-1), (1, 0)
            )
            losses = token_losses(logp, batch.behaviour_logprobs, batch.advantages, loss_config).loss
            totals.loss[name] += float((losses * batch.loss_mask).sum())
            totals.nll[name] += float((-logp * batch.loss_mask).sum())
        cand, champ = torch.log_softmax(logits["candidate"], -1), torch.log_softmax(logits["champion"], -1)
        kl = (cand.exp() * (cand - champ)).sum(-1)  # (B, T-1) full-vocabulary KL per position
        totals.kl += float((kl * mask).sum())
        totals.tokens += float(mask.sum())
    return totals

