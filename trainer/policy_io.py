"""The policy folder (docs/architecture.md, contract 6): a Hugging Face folder that serving loads and the trainer
exports."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

# Files the export writes itself; everything else in the parent folder (tokenizer, templates) is copied.
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"}


def load_policy(folder: Path) -> PreTrainedModel:
    """fp32 weights (DeepSpeed casts for bf16/fp16), dropout off: logprobs must match what serving sampled."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def export_policy(model: PreTrainedModel, state_dict: dict[str, torch.Tensor], out_dir: Path, parent_folder: Path
                  ) -> Path:
    """Write safetensors weights + config, and the parent's tokenizer files, to out_dir (replaced if present)."""
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging, state_dict=state_dict, safe_serialization=True)
    for item in Path(parent_folder).iterdir():
        if item.is_file() and item.name not in MODEL_FILES:
            shutil.copy2(item, staging / item.name)
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)  # a half-written export is never mistaken for a finished one
    return out_dir
