"""The demo's base policy: a tiny word-level GPT-2 fitted to synthetic demonstrations, then left to the loop."""

from demo.policy.bootstrap import bootstrap_base_policy
from demo.policy.vocabulary import VOCABULARY

__all__ = ["VOCABULARY", "bootstrap_base_policy"]
