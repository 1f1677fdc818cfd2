"""Tokens are scored under the distribution vLLM sampled them from: temperature, top-k, then top-p.

The fast tests compare trainer/gate/scoring.py with vLLM's own sampler functions and with a plain forward; the slow
one samples with a live vLLM engine (processed logprobs, as serving records them) and re-scores the tokens.
"""

from __future__ import annotations

import pytest
import torch

from trainer.gate.scoring import TokenSampling, processed_logprobs, score_pair, score_tokens


def _vllm_processed(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor):
    """What vLLM's Sampler returns as processed logprobs for a batch of random-sampled rows."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    scaled = logits.clone().div_(temperature[:, None])
    vocab = logits.shape[-1]
    k = torch.where((top_k <= 0) | (top_k >= vocab), torch.full_like(top_k, vocab), top_k)
    return apply_top_k_top_p_pytorch(scaled, k, top_p).log_softmax(-1)


def test_processing_matches_vllms_sampler_including_ties():
    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 3
    logits[:, 10:14] = logits[:, 10:11]  # ties at the top-k threshold are kept by both
    temperature = torch.rand(64) + 0.3
    top_p = torch.where(torch.rand(64) < 0.7, torch.rand(64) * 0.9 + 0.05, torch.ones(64))
    top_k = torch.randint(0, 30, (64,))
    reference = _vllm_processed(logits, temperature, top_p, top_k)
    for token in range(50):
        targets = torch.full((64,), token)
        logp, unscorable = processed_logprobs(logits, targets, temperature, top_p, top_k, ties="keep")
        expected = reference[:, token]
        inside = torch.isfinite(expected)
        assert torch.equal(unscorable, ~inside)  # outside vLLM's set exactly when vLLM gives it -inf
        assert torch.allclose(logp[inside], expected[inside], atol=1e-6)
        untruncated = (logits / temperature[:, None]).log_softmax(-1)[:, token]
        assert torch.allclose(logp[~inside], untruncated[~inside])  # outside: finite, tempered, untruncated


def test_greedy_tokens_are_unscorable_and_scored_as_vllm_records_them():
    logits = torch.randn(3, 7)
    targets = logits.argmax(-1)
    temperature, top_p, top_k = torch.zeros(3), torch.full((3,), 0.5), torch.full((3,), 2)
    logp, unscorable = processed_logprobs(logits, targets, temperature, top_p, top_k)
    assert unscorable.all()  # the behaviour policy was a point mass: no ratio is meaningful
    assert torch.allclose(logp, logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1))


def test_ties_at_the_top_k_threshold_or_the_top_p_boundary_make_the_step_unscorable():
    # Row 0: logits 3, 2, 2, 1 and top-k 2: the threshold 2 is tied (CPU keeps 3 tokens, Triton exactly 2).
    # Row 1: logits 2, 1, 1, -9 and top-p 0.6: the boundary falls inside the tied group at 1.
    # Row 2: distinct logits, the same top-k 2: no tie, both rules agree.
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0], [2.0, 1.0, 1.0, -9.0], [3.0, 2.0, 1.5, 1.0]])
    targets = torch.tensor([0, 0, 0])
    temperature, top_p, top_k = torch.ones(3), torch.tensor([1.0, 0.6, 1.0]), torch.tensor([2, 0, 2])
    reference = _vllm_processed(logits, temperature, top_p, top_k)[:, 0]  # vLLM's CPU (native) rule
    kept_logp, kept_bad = processed_logprobs(logits, targets, temperature, top_p, top_k, ties="keep")
    assert torch.allclose(kept_logp, reference) and not kept_bad.any()
    logp, unscorable = processed_logprobs(logits, targets, temperature, top_p, top_k)  # default: unscorable
    assert unscorable.tolist() == [True, True, False]
    assert torch.isfinite(logp).all() and torch.allclose(logp[2], reference[2])


def test_temperatures_below_vllms_floor_are_scored_at_the_floor_vllm_samples_with():
    from vllm import SamplingParams

    used = SamplingParams(temperature=0.005).temperature  # what the engine samples with
    assert used == pytest.approx(0.01)
    torch.manual_seed(2)
    logits = torch.randn(4, 9) * 0.05  # small gaps, so 0.005 and 0.01 give very different logprobs
    targets = torch.tensor([1, 2, 3, 4])
    logp, unscorable = processed_logprobs(logits, targets, torch.full((4,), 0.005), torch.ones(4),
                                          torch.zeros(4, dtype=torch.long))
    expected = (logits / used).log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-5) and not unscorable.any()


def test_tokens_of_unknown_sampling_are_unscorable():
    logits = torch.randn(3, 7)
    targets = torch.tensor([0, 1, 2])
    temperature = torch.tensor([float("nan"), 0.7, float("nan")])
    logp, unscorable = processed_logprobs(logits, targets, temperature, torch.tensor([0.9, 0.9, 1.0]),
                                          torch.zeros(3, dtype=torch.long))
    assert unscorable.tolist() == [True, False, True] and torch.isfinite(logp).all()


@pytest.fixture(scope="module")
def model(tiny_policy_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32).eval()


def _batch():
    torch.manual_seed(1)
    token_ids = torch.randint(4, 60, (3, 9))
    attention = torch.ones_like(token_ids)
    attention[1, 6:] = 0  # right padding
    token_ids[1, 6:] = 0
    sampling = TokenSampling(torch.full((3, 9), 0.7), torch.full((3, 9), 0.9), torch.full((3, 9), 20))
    return token_ids, attention, sampling


def test_chunked_scoring_equals_processing_the_full_logits(model):
    token_ids, attention, sampling = _batch()
    with torch.no_grad():
        logits = model(input_ids=token_ids, attention_mask=attention).logits[:, :-1]
    predicted = attention[:, 1:].bool()
    expected, expected_bad = processed_logprobs(
        logits[predicted], token_ids[:, 1:][predicted], *(x[:, 1:][predicted] for x in
                                                           (sampling.temperature, sampling.top_p, sampling.top_k)))
    for chunk in (1, 4, 512):
        with torch.no_grad():
            scored = score_tokens(model, token_ids, attention, sampling, chunk_tokens=chunk)
        assert torch.allclose(scored.logp[:, 1:][predicted], expected, atol=1e-5)
        assert torch.equal(scored.unscorable[:, 1:][predicted], expected_bad)
        assert scored.logp[:, 0].abs().sum() == 0 and scored.logp[1, 6:].abs().sum() == 0  # column 0, padding


def test_scoring_gradients_flow_through_the_checkpointed_chunks(model):
    token_ids, attention, sampling = _batch()
    chunked = score_tokens(model, token_ids, attention, sampling, chunk_tokens=4).logp.sum()
    (grad_chunked,) = torch.autograd.grad(chunked, model.transformer.wte.weight)
    whole = score_tokens(model, token_ids, attention, sampling, chunk_tokens=512).logp.sum()
    (grad_whole,) = torch.autograd.grad(whole, model.transformer.wte.weight)
    assert torch.allclose(grad_chunked, grad_whole, atol=1e-5) and grad_whole.abs().sum() > 0


def test_scoring_only_the_wanted_tokens_gives_their_scores_and_gradient_exactly(model):
    """A step scores its loss-masked tokens only (the vocabulary projection is most of its cost): their logprobs,
    flags and gradient are those of scoring every token, and the tokens not wanted get 0."""
    token_ids, attention, sampling = _batch()
    wanted = torch.zeros_like(attention, dtype=torch.bool)
    wanted[0, 5:], wanted[2, 3:7] = True, True
    weight = model.transformer.wte.weight
    every = score_tokens(model, token_ids, attention, sampling)
    some = score_tokens(model, token_ids, attention, sampling, chunk_tokens=5, wanted=wanted)
    assert torch.allclose(some.logp[wanted], every.logp[wanted], atol=1e-6)
    assert torch.equal(some.unscorable[wanted], every.unscorable[wanted])
    assert some.logp[~wanted].abs().sum() == 0 and not some.unscorable[~wanted].any()
    (grad_some,) = torch.autograd.grad((some.logp * wanted).sum(), weight)
    (grad_every,) = torch.autograd.grad((every.logp * wanted).sum(), weight)
    assert torch.allclose(grad_some, grad_every, atol=1e-6) and grad_every.abs().sum() > 0
    # Nothing wanted (a zero-weight filler micro-batch): the result still reaches the weights, with zero gradient.
    none = score_tokens(model, token_ids, attention, sampling, wanted=torch.zeros_like(wanted))
    (grad_none,) = torch.autograd.grad((none.logp * 0).sum(), weight)
    assert grad_none.abs().sum() == 0


def test_score_pair_gives_each_models_scores_and_the_full_vocabulary_kl(model, tiny_policy_dir):
    from transformers import AutoModelForCausalLM

    from demo.policy.tiny_policy import build_policy

    other_dir = build_policy(tiny_policy_dir.parent / "kl-other", ["edit", "search", "ask", "fix", "file", "done"],
                             seed=3)
    other = AutoModelForCausalLM.from_pretrained(other_dir, dtype=torch.float32).eval()
    token_ids, attention, sampling = _batch()
    wanted = torch.zeros_like(attention, dtype=torch.bool)
    wanted[:, 3:] = True
    with torch.no_grad():
        pair = score_pair(model, other, token_ids, attention, sampling, chunk_tokens=5, wanted=wanted)
        a = model(input_ids=token_ids, attention_mask=attention).logits[:, :-1].log_softmax(-1)
        b = other(input_ids=token_ids, attention_mask=attention).logits[:, :-1].log_softmax(-1)
        for scored, alone in [(pair.candidate, score_tokens(model, token_ids, attention, sampling, chunk_tokens=5, wanted=wanted)),
                              (pair.champion, score_tokens(other, token_ids, attention, sampling, chunk_tokens=5, wanted=wanted))]:
            assert torch.equal(scored.logp, alone.logp) and torch.equal(scored.unscorable, alone.unscorable)
        same = score_pair(model, model, token_ids, attention, chunk_tokens=7)
    expected = (a.exp() * (a - b)).sum(-1) * attention[:, 1:] * wanted[:, 1:]
    assert torch.allclose(pair.kl[:, 1:], expected, atol=1e-5) and pair.kl[:, 0].abs().sum() == 0
    assert pair.kl[:, 1:3].abs().sum() == 0 < pair.kl.abs().sum()  # not wanted: not scored
    assert same.kl.abs().max() < 1e-6


PROMPTS = ["fix the file :", "ask the file : search", "done : edit", "search file fix", "edit edit file :",
           "fix : ask", "file done :", "the file"]


def _sample_with_vllm(policy_dir, prompts: list[list[int]], **sampling) -> list[tuple[list[int], list[float]]]:
    """Completions and their recorded logprobs from a live vLLM engine set up as serving sets it up."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=str(policy_dir), gpu_memory_utilization=0.2, max_model_len=128, enforce_eager=True,
              dtype="float32", logprobs_mode="processed_logprobs", disable_log_stats=True, seed=0)
    try:
        params = SamplingParams(max_tokens=24, logprobs=1, seed=7, ignore_eos=True, **sampling)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
        return [(list(o.outputs[0].token_ids), [step[t].logprob for step, t in
                                                zip(o.outputs[0].logprobs, o.outputs[0].token_ids)])
                for o in outputs]
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.slow
def test_live_vllm_processed_logprobs_are_reproduced_by_the_trainer(model, tiny_policy_dir):
    from transformers import AutoTokenizer

    from liverl.config.trainer import LossConfig
    from trainer.step.batching import Sample, collate, score_batch
    from trainer.step.losses import token_losses

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 20}
    completions = _sample_with_vllm(tiny_policy_dir, prompts, **sampling)
    samples = []
    for prompt, (tokens, logprobs) in zip(prompts, completions):
        n = len(prompt) + len(tokens)
        samples.append(Sample(prompt + tokens, [0] * len(prompt) + [1] * len(tokens), [0.0] * len(prompt) + logprobs,
                              1.0, 1.0, [sampling["temperature"]] * n, [sampling["top_p"]] * n, [sampling["top_k"]] * n))
    batch = collate(samples)
    mask = batch.loss_mask > 0

    def log_ratios(scored_logp):
        return (scored_logp - batch.behaviour_logprobs)[mask]

    with torch.no_grad():
        untruncated = score_tokens(model, batch.token_ids, batch.attention_mask).logp  # what the trainer did before
        scored = score_batch(model, batch)
        clipped = token_losses(scored.logp, batch.behaviour_logprobs, batch.advantages, LossConfig(), mask).clipped
    before, after = log_ratios(untruncated).abs().mean().item(), log_ratios(scored.logp).abs().mean().item()
    print(f"\nmean |log r| over {int(mask.sum())} vLLM-sampled tokens (T 0.7, top-p 0.9, top-k 20): "
          f"before (T=1 untruncated) {before:.4f}, after (processed) {after:.2e}")
    assert after <= 1e-3 and before > 10 * after
    assert not scored.unscorable[mask].any()  # every sampled token lies inside the trainer's truncated set
    assert clipped[mask].sum() == 0
