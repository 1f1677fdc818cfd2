"""A policy per tenant: one LoRA adapter per tenant group on one shared, frozen base, each its own DeepSpeed engine.

    tenant_policies(base, parents, TrainerConfig) -> TenantPolicies
    policies.activate(group) -> the group's engine, with its adapter the one that runs and takes gradients

One peft model holds every group's adapter under its own name, so the base weights are in memory once. Each group
has a DeepSpeed engine of its own over that model, whose optimizer holds that group's adapter alone: an adapter
is the only one that requires gradients while its group is active (peft's set_adapter), so a step on one group's
rows computes no gradient for, and steps no optimizer state of, any other group. ZeRO stages 0 to 2 keep the
modules whole; ZeRO-3 partitions the whole module per engine and is refused.

Each group's export is an ordinary adapter folder (liverl/contracts/adapter.py) on the shared base, loadable alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config.trainer import TrainerConfig
from liverl.contracts.adapter import AdapterManifest, is_adapter_folder
from liverl.io.model_loading import MODEL_LOADING
from trainer.io.policy_io import export_adapter, load_full_weights
from trainer.step.adapters import AdapterBase, attach_adapter

if TYPE_CHECKING:
    import torch
    from deepspeed import DeepSpeedEngine
    from peft import PeftModel
    from transformers import PreTrainedModel


def adapter_name(group: str) -> str:
    """The peft adapter name of a tenant group; "tenant-" keeps a tenant named like peft's defaults apart."""
    return f"tenant-{group}"


@dataclass
class TenantPolicies:
    peft: PeftModel  # the one peft model: the shared base and an adapter per group
    engines: dict[str, DeepSpeedEngine]  # group -> the engine whose optimizer holds that group's adapter only
    base: AdapterBase  # the full-weights version every group's adapter applies to

    @property
    def model(self) -> PreTrainedModel:
        """The base with every adapter injected (what each engine trains and scoring scores)."""
        return self.peft.get_base_model()

    @property
    def groups(self) -> list[str]:
        return sorted(self.engines)

    @property
    def is_adapter(self) -> bool:
        return True

    def describe(self) -> str:
        config = next(iter(self.peft.peft_config.values()))
        return f"lora r{config.r} per group on base v{self.base.version}"

    def activate(self, group: str) -> DeepSpeedEngine:
        """The group's engine, with the group's adapter the one that runs and alone requires gradients."""
        if group not in self.engines:
            raise KeyError(f"no adapter for tenant group {group!r}; the groups are {self.groups} "
                           "(trainer.tenants.adapters, and the shared group)")
        self.peft.set_adapter(adapter_name(group))  # peft: the others stop requiring gradients
        return self.engines[group]

    def adapter_parameters(self, group: str) -> dict[str, torch.Tensor]:
        """The group's adapter parameters by name (the live tensors)."""
        marker = f".{adapter_name(group)}."
        return {name: param for name, param in self.peft.named_parameters() if marker in name}

    def rewind(self, group: str, parent: Path | None, config: TrainerConfig) -> None:
        """The group's adapter back to the adapter folder parent (None: a new adapter, lora_B zero: the base) with a
        new optimizer: what a fresh start from that parent holds. No other group's adapter or optimizer is touched."""
        import torch
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from peft.utils import load_peft_weights

        from trainer.step.engine import build_engine

        name = adapter_name(group)
        if group not in self.engines:
            raise KeyError(f"no adapter for tenant group {group!r}; the groups are {self.groups}")
        with torch.no_grad():
            if parent is None:
                for module in self.peft.modules():
                    if name in getattr(module, "lora_A", {}):
                        module.reset_lora_parameters(name, init_lora_weights=True)
            else:
                weights = load_peft_weights(str(parent))
                expected = get_peft_model_state_dict(self.peft, adapter_name=name)  # keys as the folder holds them
                shapes = {key: tuple(tensor.shape) for key, tensor in weights.items()}
                if shapes != {key: tuple(tensor.shape) for key, tensor in expected.items()}:  # checked before any copy
                    odd = sorted(set(shapes) ^ set(expected)) or [k for k in shapes if shapes[k] != expected[k].shape]
                    raise ValueError(f"{parent} does not fit tenant group {group!r}'s adapter (another rank, target "
                                     f"modules or base?): {odd[:3]}")
                set_peft_model_state_dict(self.peft, weights, adapter_name=name)
        self.peft.set_adapter(name)  # the new engine's optimizer takes what requires gradients: this adapter
        self.engines[group] = build_engine(self.peft.get_base_model(), config)
        self.peft.get_base_model().eval()

    def manifest(self) -> AdapterManifest:
        config = next(iter(self.peft.peft_config.values()))
        return AdapterManifest(base_version=self.base.version, base_digest=self.base.digest, rank=int(config.r))

    def export(self, group: str, out_dir: Path, parent_folder: Path, keep: bool = True) -> Path:
        """The group's adapter alone as an adapter folder (fp32, the manifest naming the shared base), written when
        keep (rank 0: ZeRO 0 to 2 leave every rank the whole adapter) and not there yet (the export is atomic)."""
        import torch
        from peft import get_peft_model_state_dict

        if not keep or Path(out_dir).exists():
            return Path(out_dir)

        name = adapter_name(group)
        weights = {key: tensor.detach().to("cpu", torch.float32).clone() for key, tensor in
                   get_peft_model_state_dict(self.peft, adapter_name=name).items()}
        staging = Path(out_dir).with_name(Path(out_dir).name + ".adapter")
        shutil.rmtree(staging, ignore_errors=True)
        # peft writes a non-default adapter into a folder named after it: export it alone, then lift it to the top.
        self.peft.save_pretrained(staging, selected_adapters=[name], state_dict=weights, safe_serialization=True)
        try:
            return export_adapter(_Saved(staging / name), {}, out_dir, self.manifest(), parent_folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class _Saved:
    """An adapter peft already wrote: export_adapter's `adapter` that copies those files as its save_pretrained."""

    folder: Path

    def save_pretrained(self, staging: Path, **_ignored) -> None:
        for item in self.folder.iterdir():
            shutil.copy2(item, Path(staging) / item.name)


def tenant_policies(base: AdapterBase, parents: Mapping[str, Path | None], config: TrainerConfig) -> TenantPolicies:
    """An adapter per group on base's weights: the group's parent adapter folder trained on, or (None) a new adapter
    (lora_B zero: the group's policy starts equal to the base); one DeepSpeed engine per group."""
    from peft import PeftModel

    from trainer.step.engine import build_engine

    if config.deepspeed.zero_stage == 3:
        raise ValueError("per-tenant adapters share one base module, which ZeRO-3 would partition once per tenant "
                         "engine: set trainer.deepspeed.zero_stage to 0, 1 or 2")
    if not parents:
        raise ValueError("no tenant group to train: name tenants in trainer.tenants.adapters")
    peft: PeftModel | None = None
    for group, parent in sorted(parents.items()):
        name = adapter_name(group)
        if parent is not None and not is_adapter_folder(parent):
            raise ValueError(f"tenant group {group!r} would start from {parent}, which holds full weights: a tenant's "
                             "parent is one of its adapter versions, or None for a new adapter on the base")
        if peft is None:
            with MODEL_LOADING:  # one load at a time (liverl/io/model_loading.py)
                model = load_full_weights(base.folder)
                peft = (PeftModel.from_pretrained(model, parent, adapter_name=name, is_trainable=True) if parent
                        else attach_adapter(model, config.lora, base.folder, name))
        elif parent is not None:
            peft.load_adapter(parent, adapter_name=name, is_trainable=True)
        else:
            peft.add_adapter(name, _lora_config(peft))
    assert peft is not None
    engines = {}
    for group in sorted(parents):
        peft.set_adapter(adapter_name(group))  # the engine's optimizer takes what requires gradients: this adapter
        engines[group] = build_engine(peft.get_base_model(), config)
    peft.get_base_model().eval()  # no dropout: logprobs comparable with serving's
    return TenantPolicies(peft=peft, engines=engines, base=base)


def _lora_config(peft: PeftModel):
    import copy

    return copy.deepcopy(next(iter(peft.peft_config.values())))
