"""serving.lora: what the vLLM engine is started with, and settings that cannot work refused at load."""

import pytest
from pydantic import ValidationError

from liverl.config.serving import LoraServingConfig, ServingConfig
from serving.engines.vllm_engine import _lora_args


def test_lora_off_starts_vllm_without_lora_layers_and_on_passes_the_slots():
    assert _lora_args(ServingConfig()) == {}
    config = ServingConfig(lora={"enabled": True, "max_loras": 2, "max_lora_rank": 8, "max_cpu_loras": 4})
    assert _lora_args(config) == {"enable_lora": True, "max_loras": 2, "max_lora_rank": 8, "max_cpu_loras": 4}


def test_fewer_host_slots_than_batch_slots_or_an_odd_rank_is_refused():
    with pytest.raises(ValidationError, match="max_cpu_loras .* must be at least"):
        LoraServingConfig(max_loras=8, max_cpu_loras=4)
    with pytest.raises(ValidationError):
        LoraServingConfig(max_lora_rank=12)  # vLLM's kernels take these ranks only
