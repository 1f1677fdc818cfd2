import math

from demo.product.local_policy import LocalPolicy


def test_samples_a_short_completion_with_logprobs(demo_base_policy):
    policy = LocalPolicy(demo_base_policy, version="7", seed=3)
    prompt = "coding files file_1 file_2 file_3 bug null in file_2 :"
    completion = policy.generate(prompt, "s1")
    assert completion.policy_version == "7"
    assert 1 <= len(completion.token_ids) <= 8
    assert len(completion.logprobs) == len(completion.token_ids)
    assert all(lp <= 0 and math.isfinite(lp) for lp in completion.logprobs)
    assert completion.prompt_token_ids == tuple(policy.tokenizer(prompt)["input_ids"])
    assert "<eos>" not in completion.text


def test_same_seed_same_samples(demo_base_policy):
    prompt = "search find topic_1 budget 5 :"
    first, second = LocalPolicy(demo_base_policy, seed=5), LocalPolicy(demo_base_policy, seed=5)
    assert [first.generate(prompt).token_ids for _ in range(3)] == [second.generate(prompt).token_ids for _ in range(3)]
