"""The engine a config names. Kept apart from serving.engine so the concrete engines, which import the
interface, are never imported back by it (no import cycle); each is imported only when chosen."""

from __future__ import annotations

from pathlib import Path

from liverl.config.serving import ServingConfig
from serving.engine import Engine


def make_engine(kind: str, policy_dir: Path, serving_config: ServingConfig) -> Engine:
    """The engine for one policy folder: "vllm" or the light "hf" engine."""
    if kind == "vllm":
        from serving.vllm_engine import VllmEngine

        return VllmEngine(policy_dir, serving_config)
    if kind == "hf":
        from serving.hf_engine import HfEngine

        return HfEngine(policy_dir)
    raise ValueError(f"unknown serving.engine {kind!r}: use 'vllm' or 'hf'")
