import torch

from demo.policy.offpolicy_pg import PgSample, pg_loss
from demo.product.local_policy import LocalPolicy


def test_positive_advantage_raises_the_sampled_calls_logprob(demo_base_policy):
    torch.manual_seed(0)
    policy = LocalPolicy(demo_base_policy, seed=0)
    prompt = "coding files file_1 file_2 file_3 bug null in file_2 :"
    completion = policy.generate(prompt)
    sample = PgSample(completion.prompt_token_ids, completion.token_ids, completion.logprobs, advantage=1.0)
    model = policy.model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    first_loss, ratio = pg_loss(model, [sample], policy.tokenizer.pad_token_id)
    assert abs(ratio - 1.0) < 1e-3  # same weights as the behaviour: ratio 1
    for _ in range(5):
        loss, ratio = pg_loss(model, [sample], policy.tokenizer.pad_token_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert ratio > 1.0 and loss.item() < first_loss.item()
