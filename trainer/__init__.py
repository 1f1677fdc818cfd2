"""Trainer: continuous off-policy-corrected RL on DeepSpeed, registration with lineage, promotion gate."""
