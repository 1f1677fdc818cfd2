"""The light engine: transformers on CPU, one request at a time on a worker thread.

Same interface as the vLLM engine, so the APIs, recording and hot-swap are tested quickly with it,
in-place weight updates and LoRA adapters included. Not for production traffic: no batching. Logprobs
follow vLLM's "processed_logprobs" definition.

Adapters are applied with peft on the live model (its LoRA layers injected in place, one named adapter per
version): a request runs under its adapter, or with every adapter disabled for the base weights. Requests
run one at a time on the model's thread, so choosing the active adapter there is never seen by another.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from liverl.io.model_loading import MODEL_LOADING
from serving.engines.engine import Adapter, Delta, Sampling

Emit = Callable[[Delta | BaseException], None]  # hands a delta (or the error) to the awaiting request


class HfEngine:
    name = "hf"

    def __init__(self, policy_dir: Path):
        self.policy_dir = Path(policy_dir)
        self._model = None
        self._tokenizer = None
        self._version = ""
        self._peft = None  # the peft wrapper once an adapter is loaded (it injects LoRA layers into _model)
        self._adapters: set[str] = set()  # names of the adapters loaded
        self.updating = False  # a weight update is under way: a tenant's adapter must not start on it now
        # One thread: the model is used by one request at a time (torch on CPU is not re-entrant here),
        # and a weight update queued there runs between two requests, never inside one.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine")

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._worker, self._load)

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.policy_dir)
        with MODEL_LOADING:  # one load at a time in a process (liverl/io/model_loading.py)
            model = AutoModelForCausalLM.from_pretrained(self.policy_dir, dtype=torch.float32)
        self._model = model.eval()

    async def update_weights(self, policy_dir: Path, version: str) -> dict:
        """Load the folder's weights into the live model (same architecture) and name them `version`.

        Runs on the model's own thread, so it waits for the request being sampled and the next one
        waits for it. Raises, with the old weights intact, when the folder does not fit the model."""
        if self._model is None:
            raise RuntimeError("HfEngine.update_weights before start(): await engine.start() first")
        started = time.perf_counter()
        self.updating = True
        try:
            state = await asyncio.to_thread(_read_weights, Path(policy_dir))  # off the model's thread: no pause
            queued = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(self._worker, self._load_state, state)
            self.policy_dir, self._version = Path(policy_dir), version
        finally:
            self.updating = False
        done = time.perf_counter()
        return {"seconds": done - started, "pause_s": done - queued, "repacked_heads": 0}

    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str,
                              adapter: Adapter | None = None) -> list[float]:
        """The raw logprob of each prompt token after the first, given the ones before it (vLLM's prompt
        logprobs; serving/swap/weight_check.py compares them), under the adapter if one is given, on the model's own
        thread between requests."""
        if self._model is None:
            raise RuntimeError("HfEngine.prompt_logprobs before start(): await engine.start() first")
        return await asyncio.get_running_loop().run_in_executor(self._worker, self._score, list(prompt_token_ids),
                                                                adapter)

    def _score(self, prompt_ids: list[int], adapter: Adapter | None) -> list[float]:
        import torch

        with torch.inference_mode(), self._under(adapter):
            ids = torch.tensor([prompt_ids])  # (1, T)
            logits = self._model(input_ids=ids).logits[0, :-1].float()  # (T-1, V); peft's layers sit inside it
            return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].tolist()

    async def load_adapter(self, adapter: Adapter) -> dict:
        """Read the peft adapter onto the live model (on the model's thread, between two requests)."""
        if self._model is None:
            raise RuntimeError("HfEngine.load_adapter before start(): await engine.start() first")
        started = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(self._worker, self._add_adapter, adapter)
        return {"seconds": time.perf_counter() - started}

    async def unload_adapter(self, adapter: Adapter) -> None:
        if self._model is not None and adapter.name in self._adapters:
            await asyncio.get_running_loop().run_in_executor(self._worker, self._drop_adapter, adapter)

    def has_adapter(self, adapter: Adapter) -> bool:
        return adapter.name in self._adapters

    def _add_adapter(self, adapter: Adapter) -> None:
        if adapter.name in self._adapters:
            return
        from peft import PeftConfig, PeftModel, set_peft_model_state_dict
        from safetensors.torch import load_file

        from liverl.contracts.adapter import ADAPTER_WEIGHTS_FILE

        try:  # read everything before the live model changes: a bad folder must leave it as it was
            config = PeftConfig.from_pretrained(str(adapter.path))
            weights = load_file(Path(adapter.path) / ADAPTER_WEIGHTS_FILE)
        except Exception as error:
            raise ValueError(f"adapter {adapter.name} from {adapter.path} does not fit the serving model ({error}): "
                             "export it from this base policy") from error
        config.inference_mode = True
        try:
            if self._peft is None:
                self._peft = PeftModel(self._model, config, adapter_name=adapter.name)
            else:
                self._peft.add_adapter(adapter.name, config)
            self._adapters.add(adapter.name)
            loaded = set_peft_model_state_dict(self._peft, weights, adapter_name=adapter.name)
            missing = [key for key in loaded.missing_keys if f".{adapter.name}." in key]
            if loaded.unexpected_keys or missing:
                raise ValueError(f"unexpected tensors {loaded.unexpected_keys[:3]}, missing {missing[:3]}")
        except Exception as error:
            self._drop_adapter(adapter)  # its layers come out again: the base and other adapters are untouched
            raise ValueError(f"adapter {adapter.name} from {adapter.path} does not fit the serving model ({error}): "
                             "export it from this base policy") from error
        self._peft.eval()

    def _drop_adapter(self, adapter: Adapter) -> None:
        self._adapters.discard(adapter.name)
        if adapter.name not in self._peft.peft_config:
            return
        if len(self._peft.peft_config) == 1:  # peft cannot run with no adapter left: take its layers out again
            self._model = self._peft.unload()
            self._peft = None
        else:
            self._peft.delete_adapter(adapter.name)

    def _under(self, adapter: Adapter | None):
        """The context a forward pass runs in: the adapter active, or every adapter off (the base weights)."""
        import contextlib

        if adapter is not None:
            self._add_adapter(adapter)  # like vLLM: an adapter not loaded beforehand is loaded by its first request
            self._peft.set_adapter(adapter.name)
            return contextlib.nullcontext()
        return self._peft.disable_adapter() if self._peft is not None else contextlib.nullcontext()

    async def weight_version(self) -> str:
        """The version named by the last update_weights ("" for the weights loaded at start)."""
        return self._version

    def _load_state(self, state: dict) -> None:
        import torch

        current = _base_state(self._model)
        loaded = {key for key in current if key in state}
        shared = {current[key].data_ptr() for key in loaded}
        missing = [key for key in current if key not in state and current[key].data_ptr() not in shared]
        unexpected = [key for key in state if key not in current]
        wrong = [key for key in loaded if current[key].shape != state[key].shape]
        if missing or unexpected or wrong:
            raise ValueError(f"the new weights do not fit the serving model (missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]}, other shapes {wrong[:3]}): a new architecture needs a new engine, "
                             "use serving.swap_mode = 'two_engine'")
        with torch.no_grad():
            for key in loaded:  # tied tensors (an absent lm_head) follow the tensor they share
                current[key].copy_(state[key])

    async def generate(self, prompt_token_ids: list[int], sampling: Sampling, request_id: str,
                       final_only: bool = False, adapter: Adapter | None = None
                       ) -> AsyncIterator[Delta]:  # streams either way
        if self._model is None:
            raise RuntimeError("HfEngine.generate before start(): await engine.start() first")
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue = asyncio.Queue()
        cancelled = threading.Event()

        def emit(item: Delta | BaseException) -> None:
            loop.call_soon_threadsafe(deltas.put_nowait, item)

        job = loop.run_in_executor(self._worker, self._sample, list(prompt_token_ids), sampling, emit, cancelled,
                                   adapter)
        try:
            while True:
                item = await deltas.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    break
            await job
        finally:
            cancelled.set()

    def _sample(self, prompt_ids: list[int], sampling: Sampling, emit: Emit, cancelled: threading.Event,
                adapter: Adapter | None) -> None:
        try:
            with self._under(adapter):
                self._sample_tokens(prompt_ids, sampling, emit, cancelled)
        except BaseException as error:  # handed to the awaiting request, never lost on the worker
            emit(error)

    def _sample_tokens(self, prompt_ids: list[int], sampling: Sampling, emit: Emit, cancelled: threading.Event) -> None:
        import torch

        generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed else None
        eos = self._stop_ids()
        completion: list[int] = []
        past = None
        inputs = torch.tensor([prompt_ids])  # (1, T) ids
        with torch.inference_mode():
            for step in range(sampling.max_tokens):
                if cancelled.is_set():
                    return
                out = self._model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()  # (V,)
                token, logprob = _pick(logits, sampling, generator)
                completion.append(token)
                finish = None
                if token in eos:
                    finish = "stop"
                elif sampling.stop and _hits_stop(self._tokenizer.decode(completion), sampling.stop):
                    finish = "stop"
                elif step + 1 == sampling.max_tokens:
                    finish = "length"
                emit(Delta([token], [logprob], finish))
                if finish:
                    return
                inputs = torch.tensor([[token]])
        emit(Delta([], [], "length"))  # max_tokens == 0

    def _stop_ids(self) -> set[int]:
        """The tokens that end a completion, as vLLM takes them: the tokenizer's eos and every eos_token_id of the
        model's generation_config.json (chat models list their end-of-turn token there: <|eot_id|>, <end_of_turn>)."""
        ids = {self._tokenizer.eos_token_id}
        configured = getattr(self._model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return {i for i in ids if i is not None}

    def failure(self) -> str | None:
        return None  # it runs in this process: if it is gone, so is the server

    async def shutdown(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
        self._model = None


def _base_state(model) -> dict:
    """The model's own tensors by their checkpoint names, also once peft has injected LoRA layers (which move a
    wrapped layer's weight under `.base_layer.` and add `lora_*` tensors that no checkpoint holds)."""
    return {key.replace(".base_layer.", "."): value for key, value in model.state_dict().items()
            if ".lora_" not in key}


def _read_weights(policy_dir: Path) -> dict:
    """The folder's tensors (every *.safetensors shard), in fp32 like the serving model."""
    import torch
    from safetensors.torch import load_file

    files = sorted(policy_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {policy_dir}: export the policy with save_pretrained")
    state = {}
    for file in files:
        state.update({key: value.to(torch.float32) for key, value in load_file(file).items()})
    return state


def _pick(logits, sampling: Sampling, generator) -> tuple[int, float]:
    """Sample one token; return it with its logprob under the distribution it was drawn from."""
    import torch

    if sampling.temperature <= 1e-5:  # greedy: logprobs of the raw distribution, as vLLM does
        logprobs = torch.log_softmax(logits, -1)
        token = int(torch.argmax(logits))
        return token, float(logprobs[token])
    scaled = logits / sampling.temperature
    if sampling.top_k > 0 and sampling.top_k < scaled.numel():
        kth = torch.topk(scaled, sampling.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if sampling.top_p < 1.0:
        order = torch.argsort(scaled, descending=True)
        cumulative = torch.cumsum(torch.softmax(scaled[order], -1), -1)
        drop = cumulative - torch.softmax(scaled[order], -1) > sampling.top_p  # keep the token crossing p
        scaled = scaled.clone()
        scaled[order[drop]] = float("-inf")
    logprobs = torch.log_softmax(scaled, -1)
    token = int(torch.multinomial(logprobs.exp(), 1, generator=generator))
    return token, float(logprobs[token])


def _hits_stop(text: str, stop: tuple[str, ...]) -> bool:
    return any(s and s in text for s in stop)
