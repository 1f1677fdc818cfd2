"""The adapter format: what the trainer exports and registers for a LoRA version, and what serving loads.

A LoRA version's artifact is a peft adapter folder, loadable as is by `peft.PeftModel.from_pretrained` and by
vLLM's `LoRARequest`:

    adapter_config.json          peft's config (rank, alpha, target modules, base_model_name_or_path)
    adapter_model.safetensors    the adapter weights (fp32)
    liverl_adapter.json          AdapterManifest below: which registered base version it applies to
    tokenizer files              copied from the base policy, so the folder alone tokenizes

The registered version also carries the tags `names.TAG_WEIGHTS_KIND = names.WEIGHTS_ADAPTER` and
`names.TAG_BASE_VERSION`; a full-weights version has no manifest (and kind `full`, or no kind tag).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

MANIFEST_FILE = "liverl_adapter.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass(frozen=True)
class AdapterManifest:
    """Written by the trainer's export next to the peft files; read by serving and the gate."""

    base_version: str  # registry version of the full-weights policy the adapter applies to
    base_digest: str  # sha256 of that base's weight files (the registry's base digest tag)
    rank: int  # LoRA rank r

    def write(self, folder: Path) -> Path:
        path = Path(folder) / MANIFEST_FILE
        path.write_text(json.dumps(asdict(self), sort_keys=True) + "\n")
        return path


def is_adapter_folder(folder: Path) -> bool:
    """True when folder holds an adapter (a manifest and peft's config) rather than full weights."""
    folder = Path(folder)
    return (folder / MANIFEST_FILE).is_file() and (folder / ADAPTER_CONFIG_FILE).is_file()


def read_manifest(folder: Path) -> AdapterManifest:
    """The folder's manifest; raises ValueError naming the file when it is missing or malformed."""
    path = Path(folder) / MANIFEST_FILE
    try:
        body = json.loads(path.read_text())
        return AdapterManifest(base_version=str(body["base_version"]), base_digest=str(body["base_digest"]),
                               rank=int(body["rank"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a liverl adapter manifest ({error}); re-export the adapter") from error
