"""The policy the trainer trains: full weights, or a LoRA adapter (peft) on frozen base weights.

    adapter_base(parent_version, parent_folder, registry, download_dir) -> AdapterBase  (rank 0)
    trainable_policy(parent_folder, base, LoraConfig) -> TrainablePolicy(model, adapter, base)

`model` is what DeepSpeed trains and trainer/gate/scoring.py scores, a Hugging Face causal LM either way: with an
adapter it is the model peft wrapped (`PeftModel.get_base_model()`), the same LlamaForCausalLM with LoRA layers
injected, so its `base_model` and `get_output_embeddings()` still name the decoder and the output head (the
PeftModel itself would hand scoring peft's tuner in place of the decoder). Only the adapter's parameters
require gradients, so the optimizer (trainer/step/engine.py) holds only them; the PeftModel is kept to export them.

Every adapter version applies to one full-weights version, its base: the base stays fixed while training goes
on from adapter version to adapter version (each export is the whole adapter, never a delta of a delta).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config.trainer import LoraConfig
from liverl.contracts.adapter import AdapterManifest, is_adapter_folder, read_manifest
from liverl.io.model_loading import MODEL_LOADING
from trainer.io.policy_io import load_full_weights, load_policy, resolve_base_folder, weights_digest

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from peft import PeftModel
    from transformers import PreTrainedModel

    from trainer.io.registry import Registry

LINEAR_CLASSES = {"Linear", "Conv1D"}  # torch's, and GPT-2's transposed one (peft adapts both)
ADAPTER_NAME = "default"  # peft's name for a model's only adapter; its files then sit at the folder's top


@dataclass(frozen=True)
class AdapterBase:
    """The registered full-weights version an adapter applies to (what its manifest names)."""

    version: str
    digest: str  # weights_digest of folder: the registry's base digest tag
    folder: Path


@dataclass
class TrainablePolicy:
    """The one group's policy when no tenant has an adapter of its own (trainer/groups/tenant_adapters.py holds a policy
    per tenant group): the trainer reaches either through activate(group), export(group, ...) and describe()."""

    model: PreTrainedModel  # trained by DeepSpeed, scored by trainer/gate/scoring.py
    adapter: PeftModel | None = None  # the peft wrapper of model when training an adapter, else None
    base: AdapterBase | None = None  # the full-weights version the adapter applies to
    engine: DeepSpeedEngine | None = None  # the engine training model (trainer/step/engine.py build_engine)

    @property
    def is_adapter(self) -> bool:
        return self.adapter is not None

    def activate(self, _group: str) -> DeepSpeedEngine:
        assert self.engine is not None, "build the policy's engine first"
        return self.engine

    def export(self, _group: str, folder: Path, parent_folder: Path, keep: bool = True) -> None:
        """The engine's weights as a policy folder, written when keep (rank 0): the adapter alone with its manifest,
        or the full weights. Every rank calls it: ZeRO-3 gathers the partitioned weights collectively."""
        from trainer.io.policy_io import export_adapter, export_policy
        from trainer.step.engine import adapter_state_dict, full_state_dict

        engine = self.activate(_group)
        if self.adapter is not None:
            weights = adapter_state_dict(engine, self.adapter, keep=keep)
        else:
            weights = full_state_dict(engine, keep=keep)
        if not keep or folder.exists():  # the export is atomic: present means complete
            return
        if self.adapter is not None:
            export_adapter(self.adapter, weights, folder, self.manifest(), parent_folder)
        else:
            export_policy(engine.module, weights, folder, parent_folder)

    def manifest(self) -> AdapterManifest:
        assert self.adapter is not None and self.base is not None, "a full-weights policy has no adapter manifest"
        rank = self.adapter.peft_config[ADAPTER_NAME].r
        return AdapterManifest(base_version=self.base.version, base_digest=self.base.digest, rank=int(rank))

    def describe(self) -> str:
        if self.adapter is None:
            return "full weights"
        # ds_numel: ZeRO-3 leaves each rank a partition (numel 0) of every parameter.
        trainable = sum(getattr(p, "ds_numel", p.numel()) for p in self.model.parameters() if p.requires_grad)
        return (f"lora r{self.adapter.peft_config[ADAPTER_NAME].r} on base v{self.base.version} "
                f"({trainable:,} trainable parameters)")


def adapter_base(parent_version: str, parent_folder: Path, registry: Registry, download_dir: Path) -> AdapterBase:
    """Rank 0: the base of the parent's adapter (downloaded into download_dir), or the parent itself when it holds
    full weights (an adapter trained from it applies to it)."""
    parent_folder = Path(parent_folder)
    if not is_adapter_folder(parent_folder):
        return AdapterBase(parent_version, weights_digest(parent_folder), parent_folder)
    manifest = read_manifest(parent_folder)
    downloaded = registry.download(manifest.base_version, download_dir)
    folder = resolve_base_folder(parent_folder, base_folder=downloaded)  # checks the digest
    return AdapterBase(manifest.base_version, manifest.base_digest, folder)


def trainable_policy(parent_folder: Path, base: AdapterBase, config: LoraConfig) -> TrainablePolicy:
    """The parent version as the policy to train: its adapter trained on, a new adapter on its full weights, or
    its full weights (config.enabled false, or None and a model below auto_min_parameters)."""
    from peft import PeftModel

    parent_folder = Path(parent_folder)
    if is_adapter_folder(parent_folder):
        if config.enabled is False:  # full fine-tuning asked for: train base + adapter merged, as one model
            return TrainablePolicy(load_policy(parent_folder, base_folder=base.folder))
        with MODEL_LOADING:  # one load at a time (liverl/io/model_loading.py)
            base_model = load_full_weights(base.folder)
            adapter = PeftModel.from_pretrained(base_model, parent_folder, adapter_name=ADAPTER_NAME, is_trainable=True)
    else:
        model = load_full_weights(parent_folder)
        if not wants_adapter(config, model):
            return TrainablePolicy(model)
        adapter = attach_adapter(model, config, base.folder)
    return TrainablePolicy(adapter.get_base_model().eval(), adapter, base)


def wants_adapter(config: LoraConfig, model: PreTrainedModel) -> bool:
    if config.enabled is not None:
        return config.enabled
    return sum(p.numel() for p in model.parameters()) >= config.auto_min_parameters


def attach_adapter(model: PreTrainedModel, config: LoraConfig, base_folder: Path,
                   name: str = ADAPTER_NAME) -> PeftModel:
    """A new LoRA adapter `name` on model (lora_B zero: the policy starts equal to its base); the base frozen."""
    import peft

    blocks = {}
    if config.top_layers is not None:
        total = model.config.num_hidden_layers
        blocks = {"layers_to_transform": list(range(max(0, total - config.top_layers), total)),
                  "layers_pattern": "layers"}
    lora = peft.LoraConfig(
        r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
        target_modules=target_modules(model, config.target_modules),
        bias="none", task_type="CAUSAL_LM", base_model_name_or_path=str(base_folder), **blocks,
    )
    return peft.get_peft_model(model, lora, adapter_name=name)


# Layers some families fuse (Phi-3: one qkv_proj, one gate_up_proj): a requested layer such a model lacks is adapted
# through the fused layer that holds it, which is also the name vLLM serves the adapter under.
FUSED_LAYERS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def linear_layers(model: PreTrainedModel) -> set[str]:
    """The names (last component) of model's linear layers an adapter can target; the output head excluded."""
    return {path.rsplit(".", 1)[-1] for path, module in model.named_modules()
            if type(module).__name__ in LINEAR_CLASSES and module is not model.get_output_embeddings()}


def target_modules(model: PreTrainedModel, requested: list[str]) -> list[str]:
    """trainer.lora.target_modules (Llama's names by default) as model names its layers: a name the model fuses
    into another becomes that layer's. ValueError naming model's layers when any requested layer is absent (peft
    would adapt the rest and silently leave it out)."""
    present = linear_layers(model)
    resolved: list[str] = []
    for wanted in requested:
        fused = [layer for layer, parts in FUSED_LAYERS.items() if wanted in parts and layer in present]
        layer = wanted if wanted in present or not fused else fused[0]
        if layer not in resolved:
            resolved.append(layer)
    absent = [layer for layer in resolved if layer not in present]
    if absent:
        raise ValueError(
            f"trainer.lora.target_modules {list(requested)} do not fit {type(model).__name__}: it has no {absent}; "
            f"its linear layers are {sorted(present)}: name some of them, or set trainer.lora.enabled=false"
        )
    return resolved
