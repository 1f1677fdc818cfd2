"""The loop learns, offline and seeded: a few real trainer steps (the table, DeepSpeed, the registry) on a fixed
table where editing is rewarded and asking is not raise the policy's expected reward on that prompt, by a margin
far above what the seed's noise moves. It is what the end-to-end demo shows at scale, without its wall clock."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainer.conftest import commit_batch, trainer_config
from trainer.io.base_policy import register_base
from trainer.io.policy_io import download_policy, load_policy
from trainer.io.registry import Registry
from trainer.loop import Trainer

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow

GOOD, BAD = "fix the file : edit file done", "fix the file : ask ask ask"  # rewarded 1 and 0 in the table
PROMPT_TOKENS = 2  # what the policy did not sample (the factory's loss mask)


def _expected_reward(model, tokenizer) -> float:
    """P(GOOD) / (P(GOOD) + P(BAD)) on the shared prompt: the expected reward of the policy restricted to the two."""
    def completion_logprob(text: str) -> float:
        ids = torch.tensor([tokenizer(text)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])
        return float(logp[PROMPT_TOKENS - 1:].sum())

    return 1.0 / (1.0 + math.exp(completion_logprob(BAD) - completion_logprob(GOOD)))


def test_a_few_seeded_steps_raise_the_expected_reward(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=2, learning_rate=1e-3, seed=0)
    config.trainer.gate.enabled = False  # judged here, on the reward itself
    config.trainer.gate.holdout_fraction = 0.0
    base = register_base(config, tiny_policy_dir, say=lambda *_: None)
    commit_batch(config.table.trajectories_uri, trajectories.batch("learn", 24), "batch-learn", 0)

    trainer = Trainer(config, say=lambda *_: None)
    trainer.start()
    assert trainer.run(follow=False) >= 1
    registry = Registry(config.mlflow)
    last = max((mv.version for mv in registry.versions() if mv.version != base), key=int)
    trained = load_policy(download_policy(registry, last, tmp_path / "downloads")).eval()

    before = _expected_reward(trajectories.model, trajectories.tokenizer)
    after = _expected_reward(trained, trajectories.tokenizer)
    print(f"expected reward: base {before:.3f}, version {last} {after:.3f}")
    assert after > before + 0.1, (before, after)
