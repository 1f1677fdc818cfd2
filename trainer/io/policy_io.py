"""The policy folder (docs/architecture.md, contract 6): a Hugging Face folder that serving loads and the trainer
exports, holding either full weights or a LoRA adapter for a registered base version (liverl/contracts/adapter.py).

    load_policy(folder)              -> the policy as one plain HF causal LM (an adapter is merged into its base)
    export_policy(model, weights, out_dir, parent_folder)         full weights
    export_adapter(adapter, weights, out_dir, manifest, parent)    peft adapter + manifest

An adapter names its base by registry version and weight digest; `resolve_base_folder` finds that base's folder
(a given folder, the registry download dir, the adapter's registry neighbours, or peft's recorded base path) and
refuses one whose digest differs.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.contracts import adapter as adapter_format
from liverl.contracts import names
from liverl.io.file_digest import files_sha256
from liverl.io.model_loading import MODEL_LOADING

if TYPE_CHECKING:
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel

    from trainer.io.registry import Registry

# Files the export writes itself; everything else in the parent folder (tokenizer, templates) is copied.
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"}
ADAPTER_FILES = {adapter_format.MANIFEST_FILE, adapter_format.ADAPTER_CONFIG_FILE, adapter_format.ADAPTER_WEIGHTS_FILE,
                 "adapter_model.bin"}


def load_policy(folder: Path, base_folder: Path | None = None, download_dir: Path | None = None) -> PreTrainedModel:
    """fp32 weights (DeepSpeed casts for bf16/fp16), dropout off: logprobs must match what serving sampled.
    An adapter folder is applied to its base (see resolve_base_folder) and merged into it."""
    folder = Path(folder)
    if not adapter_format.is_adapter_folder(folder):
        return load_full_weights(folder)
    from peft import PeftModel

    base = resolve_base_folder(folder, base_folder, download_dir)
    with MODEL_LOADING:  # one load at a time (liverl/io/model_loading.py)
        merged = PeftModel.from_pretrained(load_full_weights(base), folder).merge_and_unload()
    return merged.requires_grad_(True).eval()  # peft froze the base; a loaded policy is trainable as a whole


def load_full_weights(folder: Path) -> PreTrainedModel:
    import torch
    from transformers import AutoModelForCausalLM

    with MODEL_LOADING:  # one load at a time (liverl/io/model_loading.py)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def resolve_base_folder(adapter_folder: Path, base_folder: Path | None = None, download_dir: Path | None = None
                        ) -> Path:
    """The full-weights folder the adapter's manifest names. Looked for, in order: base_folder; the registry
    download dir's `<download_dir>/<base_version>/policy`; the same layout beside the adapter (an adapter
    downloaded from the registry); the base path peft recorded in adapter_config.json. The first that exists
    must have the manifest's weight digest, else ValueError (an adapter on the wrong base is a wrong policy)."""
    adapter_folder = Path(adapter_folder)
    manifest = adapter_format.read_manifest(adapter_folder)
    looked = []
    for candidate in _base_candidates(adapter_folder, manifest.base_version, base_folder, download_dir):
        looked.append(str(candidate))
        if not (candidate / "config.json").is_file():
            continue
        digest = weights_digest(candidate)
        if digest != manifest.base_digest:
            raise ValueError(
                f"adapter {adapter_folder} applies to base version {manifest.base_version} with weight digest "
                f"{manifest.base_digest}, but {candidate} has digest {digest}; pass the folder of that base version "
                "(Registry.download) as base_folder"
            )
        return candidate
    raise ValueError(
        f"adapter {adapter_folder} applies to base version {manifest.base_version} (digest {manifest.base_digest}), "
        f"and no folder of it was found (looked in: {', '.join(looked) or 'nowhere'}); download that version "
        "(Registry.download) and pass its folder as base_folder, or its cache dir as download_dir"
    )


def _base_candidates(adapter_folder: Path, base_version: str, base_folder: Path | None,
                     download_dir: Path | None) -> list[Path]:
    found = []
    if base_folder is not None:
        found.append(Path(base_folder))
    if download_dir is not None:
        found.append(Path(download_dir) / base_version / names.POLICY_ARTIFACT_PATH)
    if adapter_folder.name == names.POLICY_ARTIFACT_PATH:  # <cache>/<version>/policy: the registry's layout
        found.append(adapter_folder.parent.parent / base_version / names.POLICY_ARTIFACT_PATH)
    try:
        config = json.loads((adapter_folder / adapter_format.ADAPTER_CONFIG_FILE).read_text())
        recorded = config.get("base_model_name_or_path")
    except (OSError, ValueError):
        recorded = None
    if recorded and Path(recorded).is_dir():
        found.append(Path(recorded))
    return found


def download_policy(registry: Registry, version: str, cache_dir: Path) -> Path:
    """The version's folder from the registry cache (downloaded once); for an adapter, its base version is
    downloaded beside it, where load_policy looks for it."""
    folder = registry.download(version, cache_dir)
    if adapter_format.is_adapter_folder(folder):
        registry.download(adapter_format.read_manifest(folder).base_version, cache_dir)
    return folder


def weights_digest(folder: Path) -> str:
    """sha256 of the folder's *.safetensors files in name order: the registry's base digest tag
    (TAG_BASE_DIGEST, trainer/io/base_policy.py) and an adapter manifest's base_digest. Cached per file state."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder} holds no *.safetensors weights: it is not a full-weights policy folder")
    return _digest(tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in files))


@lru_cache(maxsize=32)
def _digest(files: tuple[tuple[str, int, int], ...]) -> str:
    return files_sha256(Path(path) for path, _size, _mtime in files)


def export_policy(model: PreTrainedModel, state_dict: dict[str, torch.Tensor], out_dir: Path, parent_folder: Path
                  ) -> Path:
    """Write safetensors weights + config, and the parent's tokenizer files, to out_dir (replaced if present)."""
    staging = _staging(out_dir)
    model.save_pretrained(staging, state_dict=state_dict, safe_serialization=True)
    _copy_tokenizer_files(parent_folder, staging)
    return _publish(staging, out_dir)


def export_adapter(adapter: PeftModel, weights: dict[str, torch.Tensor], out_dir: Path,
                   manifest: adapter_format.AdapterManifest, parent_folder: Path) -> Path:
    """Write the adapter alone (peft's save_pretrained of `weights`, the adapter's fp32 state dict under peft's
    names), the manifest naming its base, and the parent's tokenizer files, to out_dir (replaced if present)."""
    staging = _staging(out_dir)
    adapter.save_pretrained(staging, state_dict=weights, safe_serialization=True)
    manifest.write(staging)
    _copy_tokenizer_files(parent_folder, staging)
    return _publish(staging, out_dir)


def _staging(out_dir: Path) -> Path:
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _copy_tokenizer_files(parent_folder: Path, staging: Path) -> None:
    """Tokenizer and template files of the parent (full weights or an adapter): everything but its weights."""
    for item in Path(parent_folder).iterdir():
        weights = item.suffix in {".safetensors", ".bin"}
        if item.is_file() and not weights and item.name not in MODEL_FILES | ADAPTER_FILES:
            shutil.copy2(item, staging / item.name)


def _publish(staging: Path, out_dir: Path) -> Path:
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)  # a half-written export is never mistaken for a finished one
    return out_dir
