"""The weight probe of an export (liverl/contracts/weight_probe.py): the logprobs the trained model gives a fixed
set of token sequences, written into the exported policy folder for serving to check its replicas against.

Measured on the model object the weights came from, not re-read from the folder: for a LoRA version that model is
base + adapter, and a folder read back would prove only that the file matches itself.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from liverl.contracts.weight_probe import WeightProbe

if TYPE_CHECKING:
    import torch

PROBE_SEQUENCES = 4
PROBE_LENGTH = 16  # tokens per sequence: 4 x 15 scored tokens, one short forward pass
PROBE_SEED = 20261202
# Ids are drawn below this bound too: a config's vocab_size may be padded past the tokenizer's last id
# (which vLLM refuses in a prompt), but every tokenizer of a vocabulary this large has this many ids.
MAX_PROBE_ID = 32000


def probe_sequences(vocab_size: int, positions: int) -> list[list[int]]:
    """The fixed probe set for a vocabulary: the same ids for every version of a policy, spread over the vocabulary."""
    rng = random.Random(PROBE_SEED)
    bound = min(vocab_size, MAX_PROBE_ID)
    length = max(2, min(PROBE_LENGTH, positions))
    return [[rng.randrange(bound) for _ in range(length)] for _ in range(PROBE_SEQUENCES)]


def measure_weight_probe(model: torch.nn.Module) -> WeightProbe:
    """The probe of model's current weights (a Hugging Face causal LM, a peft model over one, or a DeepSpeed
    engine's module). Under ZeRO-3 every rank must call it: the forward pass gathers the partitioned weights."""
    import torch

    config = model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", PROBE_LENGTH)
    sequences = probe_sequences(config.vocab_size, positions)
    parameter = next(model.parameters())
    was_training = model.training
    model.eval()  # dropout off: serving never drops out
    try:
        with torch.no_grad():
            ids = torch.tensor(sequences, device=parameter.device)  # (N, T)
            logits = model(input_ids=ids).logits.float()  # (N, T, V)
            logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]  # (N, T-1)
    finally:
        model.train(was_training)
    return WeightProbe(sequences=tuple(tuple(s) for s in sequences),
                       logprobs=tuple(tuple(float(x) for x in row) for row in logprobs.cpu().tolist()),
                       dtype=str(parameter.dtype).removeprefix("torch."))

