"""Behaviour fidelity with adapters: tokens vLLM sampled with a LoRA adapter (temperature 0.7, top-p 0.9, processed
logprobs as serving records them) are scored by the trainer's adapter model to within 1e-3 of vLLM's logprobs."""

from __future__ import annotations

import pytest
import torch

from trainer.gate.scoring import TokenSampling, score_tokens
from trainer.io.policy_io import export_adapter, weights_digest
from trainer.step.adapters import AdapterBase, trainable_policy

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]  # a live vLLM engine

WORDS = ["edit", "search", "ask", "fix", "file", "done"]
PROMPTS = ["fix the file :", "ask the file : search", "done : edit", "search file fix", "edit edit file :",
           "fix : ask", "file done :", "the file"]
TEMPERATURE, TOP_P = 0.7, 0.9


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A tiny Llama base and a rank-16 adapter on every linear layer whose lora_B is random (not peft's zeros),
    so the adapter moves the policy well away from its base; (policy, base folder, adapter folder)."""
    from demo.policy.tiny_policy import build_policy
    from liverl.config.trainer import LoraConfig

    root = tmp_path_factory.mktemp("lora-vllm")
    base_dir = build_policy(root / "base", WORDS, arch="llama")
    torch.manual_seed(0)
    policy = trainable_policy(base_dir, AdapterBase("1", weights_digest(base_dir), base_dir),
                              LoraConfig(enabled=True))
    with torch.no_grad():
        for name, param in policy.adapter.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.3)
    weights = {name: p.detach().clone() for name, p in policy.adapter.named_parameters() if p.requires_grad}
    folder = export_adapter(policy.adapter, weights, root / "adapter", policy.manifest(), base_dir)
    return policy, base_dir, folder


@pytest.fixture(scope="module")
def sampled(adapter):
    """One vLLM engine for the module: completions sampled with the adapter, and their recorded logprobs."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    _policy, base_dir, folder = adapter
    tokenizer = AutoTokenizer.from_pretrained(folder)  # the adapter folder tokenizes on its own
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    llm = LLM(model=str(base_dir), enable_lora=True, max_lora_rank=16, max_loras=1, gpu_memory_utilization=0.2,
              max_model_len=128, enforce_eager=True, dtype="float32", logprobs_mode="processed_logprobs",
              disable_log_stats=True, seed=0)
    try:
        params = SamplingParams(max_tokens=24, logprobs=1, seed=7, ignore_eos=True, temperature=TEMPERATURE,
                                top_p=TOP_P)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False,
                               lora_request=LoRARequest("adapter", 1, str(folder)))
    finally:
        llm.llm_engine.engine_core.shutdown()
    return [(prompt, list(o.outputs[0].token_ids),
             [step[t].logprob for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)])
            for prompt, o in zip(prompts, outputs)]


def _score(model, sampled) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(trainer logprobs, vLLM logprobs, unscorable) of every sampled token, one sequence at a time."""
    mine, theirs, bad = [], [], []
    for prompt, tokens, logprobs in sampled:
        ids = torch.tensor([prompt + tokens])
        width = ids.shape[1]
        sampling = TokenSampling(torch.full((1, width), TEMPERATURE), torch.full((1, width), TOP_P),
                                 torch.zeros((1, width), dtype=torch.long))
        with torch.no_grad():
            scored = score_tokens(model, ids, torch.ones_like(ids), sampling)
        mine.append(scored.logp[0, len(prompt):])
        bad.append(scored.unscorable[0, len(prompt):])
        theirs.append(torch.tensor(logprobs))
    return torch.cat(mine), torch.cat(theirs), torch.cat(bad)


def test_trainer_scores_adapter_samples_as_vllm_recorded_them(adapter, sampled):
    policy, _base_dir, _folder = adapter
    mine, theirs, unscorable = _score(policy.model, sampled)
    with policy.adapter.disable_adapter():  # what a trainer that ignored the adapter would score
        base_only, _, _ = _score(policy.model, sampled)
    after, before = (mine - theirs).abs().max().item(), (base_only - theirs).abs().mean().item()
    print(f"\n{theirs.numel()} tokens vLLM sampled with the adapter (T {TEMPERATURE}, top-p {TOP_P}): "
          f"max |trainer - vLLM| {after:.2e} with the adapter; mean {before:.4f} scored on the base alone")
    assert theirs.numel() == 24 * len(PROMPTS)
    assert not unscorable.any()  # every sampled token lies inside the trainer's own top-p set
    assert after <= 1e-3 and before > 10 * after
