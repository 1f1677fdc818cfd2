"""LoRA adapters under DeepSpeed on CPU: the config, the frozen base, every ZeRO stage, the export in the adapter
format (liverl/contracts/adapter.py), and loading an adapter folder back on the right base."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from liverl.config import load_config
from liverl.contracts import adapter as adapter_format
from liverl.contracts import names
from trainer.gate.scoring import score_tokens
from trainer.io.lineage import weights_tags
from trainer.io.policy_io import export_adapter, load_policy, resolve_base_folder, weights_digest
from trainer.step.adapters import AdapterBase, trainable_policy
from trainer.step.engine import adapter_state_dict, build_engine

WORDS = ["edit", "search", "ask", "fix", "file", "done"]
IDS = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("lora") / "base", WORDS, arch="llama")


def _config(*overrides: str):
    return load_config(environ={}, overrides=[
        "--trainer.deepspeed.gradient_accumulation_steps", "1", "--trainer.learning_rate", "1e-2", *overrides,
    ]).trainer


def _base(folder, version="1") -> AdapterBase:
    return AdapterBase(version, weights_digest(folder), folder)


def _trained_adapter(llama_dir, out_dir, *overrides: str):
    """One DeepSpeed step of a new adapter on the tiny Llama, exported to out_dir; (engine, policy, folder)."""
    config = _config("--trainer.lora.enabled", "true", *overrides)
    torch.manual_seed(0)
    policy = trainable_policy(llama_dir, _base(llama_dir), config.lora)
    engine = build_engine(policy.model, config)
    loss = engine(input_ids=IDS).logits.float().logsumexp(-1).mean()
    engine.backward(loss)
    engine.step()
    engine.module.eval()
    weights = adapter_state_dict(engine, policy.adapter)
    return engine, policy, export_adapter(policy.adapter, weights, out_dir, policy.manifest(), llama_dir)


def test_lora_settings_default_to_a_llama_adapter_and_refuse_dropout():
    lora = load_config(environ={}, overrides=[]).trainer.lora
    assert lora.enabled is None and lora.rank == 16 and lora.dropout == 0.0
    assert lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert load_config(environ={}, overrides=["--trainer.lora.enabled", "false"]).trainer.lora.enabled is False
    for bad in (["--trainer.lora.dropout", "0.1"], ["--trainer.lora.rank", "0"]):
        with pytest.raises(ValidationError):  # dropout: the trainer's logprobs must be deterministic
            load_config(environ={}, overrides=bad)


def test_auto_mode_trains_tiny_policies_whole_and_real_sized_ones_through_an_adapter(llama_dir):
    tiny = trainable_policy(llama_dir, _base(llama_dir), _config().lora)
    assert tiny.adapter is None and all(p.requires_grad for p in tiny.model.parameters())
    real_sized = trainable_policy(llama_dir, _base(llama_dir), _config("--trainer.lora.auto_min_parameters", "1").lora)
    assert real_sized.adapter is not None


def test_target_modules_the_model_lacks_are_refused_with_its_layer_names(llama_dir):
    config = _config("--trainer.lora.enabled", "true", "--trainer.lora.target_modules", '["c_attn"]')
    with pytest.raises(ValueError, match="linear layers are .*q_proj"):
        trainable_policy(llama_dir, _base(llama_dir), config.lora)


@pytest.mark.parametrize("stage, precision", [(0, "fp32"), (1, "fp32"), (2, "fp32"), (3, "bf16")])
def test_deepspeed_trains_only_the_adapter_and_exports_it(llama_dir, tmp_path, stage, precision):
    base_weights = load_file(llama_dir / "model.safetensors")
    engine, policy, folder = _trained_adapter(
        llama_dir, tmp_path / "adapter", "--trainer.deepspeed.zero_stage", str(stage),
        "--trainer.deepspeed.precision", precision)
    optimized = [p for group in engine.optimizer.param_groups for p in group["params"]] if stage == 0 else []
    assert all(p.requires_grad for p in optimized)  # stage 0: the plain AdamW holds the adapter alone

    # The export: the contract's files, fp32 adapter weights only, a manifest naming the base.
    assert adapter_format.is_adapter_folder(folder)
    files = {p.name for p in folder.iterdir()}
    assert {"adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert not (folder / "model.safetensors").exists() and not (folder / "config.json").exists()
    weights = load_file(folder / adapter_format.ADAPTER_WEIGHTS_FILE)
    assert weights and all("lora_" in name and t.dtype == torch.float32 for name, t in weights.items())
    assert any(t.abs().max() > 0 for name, t in weights.items() if "lora_B" in name), "lora_B should have moved"
    manifest = adapter_format.read_manifest(folder)
    assert (manifest.base_version, manifest.base_digest, manifest.rank) == ("1", weights_digest(llama_dir), 16)
    assert json.loads((folder / adapter_format.ADAPTER_CONFIG_FILE).read_text())["r"] == 16

    # Base + exported adapter is the trained policy; the base itself never moved.
    loaded = load_policy(folder, base_folder=llama_dir)
    for name, tensor in base_weights.items():
        assert torch.equal(load_file(llama_dir / "model.safetensors")[name], tensor)
    with torch.no_grad():
        expected = engine(input_ids=IDS).logits.float()
        got = loaded(input_ids=IDS).logits
    assert torch.allclose(got, expected, atol=5e-2 if precision == "bf16" else 1e-5)


def test_scoring_reaches_the_decoder_and_head_through_peft(llama_dir, tmp_path):
    """trainer/gate/scoring.py projects the decoder's hidden states with the output head; the adapter model handed to
    it must still expose both (peft's PeftModel would hand it peft's tuner as the decoder)."""
    engine, _policy, folder = _trained_adapter(llama_dir, tmp_path / "adapter")
    attention = torch.ones_like(IDS)
    with torch.no_grad():
        scored = score_tokens(engine, IDS, attention, chunk_tokens=3).logp[:, 1:]
        logits = load_policy(folder, base_folder=llama_dir)(input_ids=IDS).logits[:, :-1]
    expected = logits.log_softmax(-1).gather(-1, IDS[:, 1:, None]).squeeze(-1)
    assert torch.allclose(scored, expected, atol=1e-5)
    # and a step through the chunked, checkpointed projection moves the adapter: gradients reach it (DeepSpeed
    # keeps them in its own buffers, so the weights' move is what shows it)
    before = {n: p.detach().clone() for n, p in engine.module.named_parameters() if "lora_" in n}
    engine.module.train()
    engine.backward(-score_tokens(engine, IDS, attention, chunk_tokens=3).logp.sum())
    engine.step()
    after = dict(engine.module.named_parameters())
    assert before and all(not torch.equal(after[n].detach(), w) for n, w in before.items() if "lora_A" in n)


def test_an_adapter_parent_is_trained_on_as_the_same_adapter(llama_dir, tmp_path):
    _engine, policy, folder = _trained_adapter(llama_dir, tmp_path / "adapter")
    resumed = trainable_policy(folder, _base(llama_dir), _config().lora)  # enabled None: the parent decides
    assert resumed.adapter is not None and resumed.manifest() == adapter_format.read_manifest(folder)
    trained = {n: p for n, p in resumed.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    original = dict(policy.model.named_parameters())
    for name, param in trained.items():
        assert torch.equal(param, original[name].detach())
    merged = trainable_policy(folder, _base(llama_dir), _config("--trainer.lora.enabled", "false").lora)
    assert merged.adapter is None and all(p.requires_grad for p in merged.model.parameters())


def test_load_policy_finds_the_base_beside_a_downloaded_adapter_and_refuses_the_wrong_one(llama_dir, tmp_path):
    _engine, _policy, exported = _trained_adapter(llama_dir, tmp_path / "adapter")
    cache = tmp_path / "registry"  # trainer.io.registry.Registry.download's layout: <cache>/<version>/policy
    adapter_folder = cache / "7" / names.POLICY_ARTIFACT_PATH
    shutil.copytree(exported, adapter_folder)
    config = json.loads((adapter_folder / adapter_format.ADAPTER_CONFIG_FILE).read_text())
    config["base_model_name_or_path"] = str(tmp_path / "elsewhere")  # peft's recorded path is gone
    (adapter_folder / adapter_format.ADAPTER_CONFIG_FILE).write_text(json.dumps(config))

    with pytest.raises(ValueError, match="applies to base version 1 .* no folder of it was found"):
        load_policy(adapter_folder)
    shutil.copytree(llama_dir, cache / "1" / names.POLICY_ARTIFACT_PATH)
    assert resolve_base_folder(adapter_folder) == cache / "1" / names.POLICY_ARTIFACT_PATH
    with torch.no_grad():
        torch.testing.assert_close(load_policy(adapter_folder)(input_ids=IDS).logits,
                                   load_policy(exported, base_folder=llama_dir)(input_ids=IDS).logits)

    from demo.policy.tiny_policy import build_policy

    other = build_policy(tmp_path / "other", WORDS, arch="llama", seed=5)
    with pytest.raises(ValueError, match="has digest"):  # an adapter on the wrong base is a wrong policy
        load_policy(adapter_folder, base_folder=other)


def test_registration_tags_name_the_weights_kind_and_the_base(llama_dir, tmp_path):
    _engine, _policy, folder = _trained_adapter(llama_dir, tmp_path / "adapter")
    assert weights_tags(folder) == {names.TAG_WEIGHTS_KIND: names.WEIGHTS_ADAPTER, names.TAG_BASE_VERSION: "1"}
    assert weights_tags(llama_dir) == {names.TAG_WEIGHTS_KIND: names.WEIGHTS_FULL}


def test_top_layers_adapts_only_the_top_blocks_and_the_backward_pass_stops_below_them(llama_dir, tmp_path):
    """trainer.lora.top_layers: lower blocks get no adapter, so no gradient is computed through them."""
    engine, policy, folder = _trained_adapter(llama_dir, tmp_path / "top", "--trainer.lora.top_layers", "1")
    blocks = policy.model.config.num_hidden_layers
    assert blocks > 1
    saved = load_file(str(folder / adapter_format.ADAPTER_WEIGHTS_FILE))
    assert saved and all(f".layers.{blocks - 1}." in key for key in saved), sorted(saved)[:4]
    needs_grad = {}
    layers = policy.model.model.layers
    hooks = [layer.register_forward_hook(lambda module, args, out, i=i: needs_grad.__setitem__(
        i, (out[0] if isinstance(out, tuple) else out).requires_grad)) for i, layer in enumerate(layers)]
    policy.model(input_ids=IDS)
    for hook in hooks:
        hook.remove()
    assert needs_grad == {i: i == blocks - 1 for i in range(blocks)}, "autograd records only the adapted block"
    assert json.loads((folder / adapter_format.ADAPTER_CONFIG_FILE).read_text())["layers_to_transform"] == [blocks - 1]
    merged = load_policy(folder, base_folder=llama_dir)
    assert not torch.equal(merged(input_ids=IDS).logits, load_policy(llama_dir)(input_ids=IDS).logits)


def test_top_layers_must_be_positive():
    with pytest.raises(ValidationError, match="top_layers"):
        _config("--trainer.lora.top_layers", "0")
