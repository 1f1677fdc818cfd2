"""The common shapes of Hugging Face causal LM through the whole path a base policy takes (docs/real-model.md):
accepted at init (`liverl train --init-from`, trainer/io/pretrained.py), a LoRA adapter trained under DeepSpeed on
the layers that family has, exported with its weight probe, then served by the hf engine and by vLLM: the base
and an in-place update to other weights each reproduce their probe, and the adapter, hot-loaded, reproduces the
trainer's probe of base + adapter and samples a chat prompt in the family's template with peft's logprobs.
Shapes the loop cannot carry are refused at init, with the reason.

vLLM costs one engine start per shape (about a minute on 2 busy cores), so its test is one per shape.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from liverl.config import load_config
from liverl.contracts.chat import render_chat
from liverl.contracts.weight_probe import read_probe
from serving.engines.engine import Adapter, Sampling
from serving.metrics import ServingMetrics
from serving.router import AdapterEngine
from serving.swap.weight_check import verify_weights
from tests.models.tiny_shapes import BY_NAME, SHAPES, build_model_folder, build_tokenizer
from tests.serving.lora_adapters import reference_logprobs
from trainer.io.base_policy import register_base
from trainer.io.pretrained import PROVEN_ARCHITECTURES, check_policy_shape
from trainer.io.weight_probe import measure_weight_probe
from trainer.step.adapters import AdapterBase, trainable_policy

SHAPE_NAMES = [shape.name for shape in SHAPES]
MESSAGES = [{"role": "system", "content": "fix the file"}, {"role": "user", "content": "search the parser"}]
STEPS = 3
FUSED_TARGETS = ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]  # Phi-3's block: q/k/v and gate/up fused
LOGPROB_TOLERANCE = 1e-3  # vLLM's fp32 kernels against peft's forward pass (measured: ~1e-6)


pytestmark = pytest.mark.big_memory  # a vLLM engine per shape: tests/conftest.py memory_share


def _config(*overrides: str):
    return load_config(environ={}, overrides=[
        "--trainer.deepspeed.gradient_accumulation_steps", "1", "--trainer.learning_rate", "1e-2",
        "--trainer.lora.enabled", "true", "--serving.dtype", "float32", *overrides])


@dataclass(frozen=True)
class ShapeFolders:
    base: Path  # version 1: the shape's random weights, with the trainer's probe of them
    second: Path  # the same shape with other weights (an in-place update), with its probe
    adapter: Path  # the adapter trained on base under DeepSpeed, exported with the probe of base + adapter
    targets: list[str]  # the layers the adapter adapts


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> ShapeFolders, built and trained once per module on first use."""
    built: dict[str, ShapeFolders] = {}

    def get(name: str) -> ShapeFolders:
        if name not in built:
            built[name] = _build(BY_NAME[name], tmp_path_factory.mktemp(name))
        return built[name]

    return get


def _build(shape, tmp: Path) -> ShapeFolders:
    from trainer.io.policy_io import export_adapter, load_policy, weights_digest
    from trainer.step.engine import adapter_state_dict, build_engine

    base, second = build_model_folder(shape, tmp / "base"), build_model_folder(shape, tmp / "second", seed=1)
    for folder in (base, second):
        measure_weight_probe(load_policy(folder)).write(folder)
    config = _config().trainer
    torch.manual_seed(0)
    policy = trainable_policy(base, AdapterBase("1", weights_digest(base), base), config.lora)
    engine = build_engine(policy.model, config)
    tokenizer = build_tokenizer(shape)
    transcript = render_chat(tokenizer, MESSAGES, None) + " done"
    ids = torch.tensor([tokenizer(transcript, add_special_tokens=False).input_ids])  # (1, T)
    for _ in range(STEPS):  # next-token loss on a chat transcript: the adapter moves away from zero
        logits = engine(input_ids=ids).logits[:, :-1].float()
        engine.backward(torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()))
        engine.step()
    engine.module.eval()
    adapter = export_adapter(policy.adapter, adapter_state_dict(engine, policy.adapter), tmp / "adapter",
                             policy.manifest(), base)
    measure_weight_probe(engine.module).write(adapter)
    targets = sorted({name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, _ in policy.adapter.named_parameters()
                      if ".lora_A." in name})
    return ShapeFolders(base, second, adapter, targets)


def _chat_prompt(folder: Path, shape) -> list[int]:
    """The chat prompt in the shape's template, tokenized as serving does (the exported folder's tokenizer)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(render_chat(tokenizer, MESSAGES, None), add_special_tokens=False).input_ids
    specials = {tokenizer.convert_tokens_to_ids(token) for token in shape.specials}
    assert tokenizer.unk_token_id not in ids or tokenizer.unk_token_id in specials
    assert len(specials & set(ids)) >= 2, f"the template's special tokens were not single ids: {ids}"
    return ids


async def _served(engine, folders: ShapeFolders, shape, serving) -> dict:
    """The path on an engine: started, its base probe, the adapter hot-loaded and its probe, a chat completion
    under the adapter, an in-place update and its probe; shut down. Returns what a test asserts on."""
    metrics, quiet = ServingMetrics(), (lambda *_: None)
    await engine.start()
    try:
        out = {"base": await verify_weights(engine, folders.base, "1", serving, metrics, quiet)}
        adapter = Adapter("liverl-v2-1", 1, folders.adapter, "2", "1")
        await engine.load_adapter(adapter)
        out["adapter"] = await verify_weights(AdapterEngine(engine, adapter), folders.adapter, "2", serving, metrics,
                                              quiet)
        prompt = _chat_prompt(folders.adapter, shape)
        deltas = [d async for d in engine.generate(prompt, Sampling(temperature=1.0, max_tokens=6, seed=7), "chat-1",
                                                   adapter=adapter)]
        out["prompt"], out["tokens"] = prompt, [t for d in deltas for t in d.token_ids]
        out["logprobs"] = [x for d in deltas for x in d.logprobs]
        out["finish"] = deltas[-1].finish_reason
        await engine.update_weights(folders.second, "3")
        out["second"] = await verify_weights(engine, folders.second, "3", serving, metrics, quiet)
        return out
    finally:
        await engine.shutdown()


def _assert_served(out: dict, folders: ShapeFolders) -> None:
    assert max(out["base"], out["adapter"], out["second"]) <= LOGPROB_TOLERANCE, out
    expected = reference_logprobs(folders.base, folders.adapter, out["prompt"], out["tokens"])
    assert max(abs(a - b) for a, b in zip(out["logprobs"], expected)) <= LOGPROB_TOLERANCE
    assert out["tokens"] and out["finish"] in {"stop", "length"}


@pytest.mark.parametrize("name", SHAPE_NAMES)
def test_init_accepts_the_shape_and_fits_lora_to_its_layers(name, tmp_path):
    shape = BY_NAME[name]
    folder = build_model_folder(shape, tmp_path / name)
    said: list[str] = []
    check_policy_shape(_config(), folder, said.append)  # vLLM engine, adapters on: the strictest combination
    assert not said and shape.architecture in PROVEN_ARCHITECTURES


@pytest.mark.slow
@pytest.mark.parametrize("name", SHAPE_NAMES)
def test_hf_engine_serves_the_trained_adapter_and_an_update(name, folders):
    from serving.engines.hf_engine import HfEngine

    built = folders(name)
    # every linear layer of a block, under the family's own names (the config's default names Llama's)
    assert built.targets == (FUSED_TARGETS if name == "phi3" else sorted(_config().trainer.lora.target_modules))
    trained, base = read_probe(built.adapter).logprobs, read_probe(built.base).logprobs
    assert max(abs(a - b) for row, other in zip(trained, base) for a, b in zip(row, other)) > 1e-3, \
        "training left the adapter at zero"
    out = asyncio.run(_served(HfEngine(built.base), built, BY_NAME[name], _config().serving))
    _assert_served(out, built)


def test_hf_engine_ends_a_turn_on_every_eos_of_the_generation_config(tmp_path):
    """A chat model lists its end-of-turn token (<|eot_id|>) beside the tokenizer's eos in generation_config.json;
    vLLM stops on all of them, so the hf engine must too. Here every id but the tokenizer's eos is listed: whatever
    the first sampled token, the turn ends there."""
    import json

    from serving.engines.hf_engine import HfEngine

    folder = build_model_folder(BY_NAME["llama"], tmp_path / "llama")
    settings = json.loads((folder / "generation_config.json").read_text())
    eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    settings["eos_token_id"] = [i for i in range(vocab) if i != eos]
    (folder / "generation_config.json").write_text(json.dumps(settings))

    async def first_turn() -> list:
        engine = HfEngine(folder)
        await engine.start()
        try:
            return [d async for d in engine.generate([0, 2], Sampling(temperature=1.0, max_tokens=8, seed=1), "r")]
        finally:
            await engine.shutdown()

    deltas = asyncio.run(first_turn())
    assert len(deltas) == 1 and deltas[0].finish_reason == "stop"


@pytest.mark.slow
@pytest.mark.parametrize("name", SHAPE_NAMES)
def test_vllm_serves_the_shape_and_hot_loads_its_adapter(name, folders):
    from serving.engines.vllm_engine import VllmEngine

    built = folders(name)
    serving = _config("--serving.engine", "vllm", "--serving.max_model_len", "128",
                      "--serving.gpu_memory_utilization", "0.05", "--serving.lora.enabled", "true",
                      "--serving.lora.max_loras", "1", "--serving.lora.max_lora_rank", "16",
                      "--serving.lora.max_cpu_loras", "2").serving
    _assert_served(asyncio.run(_served(VllmEngine(built.base, serving), built, BY_NAME[name], serving)), built)


def _foreign_folder(out: Path, kind: str) -> Path:
    """A tiny model of another kind than a causal LM, saved with a tokenizer like a policy folder."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        OPTConfig,
        OPTForCausalLM,
        T5Config,
        T5ForConditionalGeneration,
    )

    from demo.policy.tiny_policy import build_tokenizer as word_tokenizer

    tokenizer = word_tokenizer(["fix", "file"])
    size = dict(vocab_size=len(tokenizer))
    model = {
        "bert": lambda: BertForMaskedLM(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                   intermediate_size=64, **size)),
        "t5": lambda: T5ForConditionalGeneration(T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                                          **size)),
        "opt": lambda: OPTForCausalLM(OPTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                ffn_dim=64, word_embed_proj_dim=32, **size)),
    }[kind]()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind, architecture", [("bert", "BertForMaskedLM"), ("t5", "T5ForConditionalGeneration")])
def test_init_refuses_a_model_that_is_not_a_causal_lm(kind, architecture, tmp_path):
    folder = _foreign_folder(tmp_path / kind, kind)
    with pytest.raises(ValueError, match=f"{architecture}.*not a decoder-only causal LM"):
        register_base(_config(), folder, say=lambda *_: None)  # refused before the registry is reached


def test_init_refuses_a_gpt2_adapter_vllm_cannot_serve_and_takes_its_full_weights(tiny_policy_dir):
    with pytest.raises(ValueError, match="vLLM implements no LoRA layers for GPT-2.*trainer.lora.enabled = false"):
        register_base(_config(), tiny_policy_dir, say=lambda *_: None)
    on_hf = _config("--serving.engine", "hf")  # the hf engine serves any adapter, but GPT-2 lacks Llama's layers
    with pytest.raises(ValueError, match=r"has no \[.*q_proj.*its linear layers are \['c_attn', 'c_fc', 'c_proj'\]"):
        register_base(on_hf, tiny_policy_dir, say=lambda *_: None)
    said: list[str] = []
    check_policy_shape(_config("--trainer.lora.enabled", "false"), tiny_policy_dir, said.append)  # the demo's
    check_policy_shape(load_config(environ={}, overrides=[]), tiny_policy_dir, said.append)  # auto: full weights
    assert not said


def test_init_lets_an_unproven_causal_lm_through_with_a_warning(tmp_path):
    said: list[str] = []
    check_policy_shape(_config("--serving.engine", "hf", "--trainer.lora.target_modules", '["q_proj", "v_proj"]'),
                       _foreign_folder(tmp_path / "opt", "opt"), said.append)
    assert len(said) == 1 and "OPTForCausalLM is not among the shapes" in said[0]
