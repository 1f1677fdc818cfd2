"""Loading a registry version for serving: download it, check its signature, start an engine on it, and the smoke
test every version passes on the engine that will serve it before it takes a request (a short greedy generation
and the trainer's weight probe, serving/swap/weight_check.py).

Serve only signed weights: before a registry version is loaded, its downloaded files and its gate verdict must carry
the trainer's signature (liverl/io/signing.py), whatever the alias says. An alias moved by anyone with registry
access, a verdict rewritten by hand, or files replaced in the artifact store all fail check_signed; the version is
refused, counted, and the replica keeps serving what it serves.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from liverl.io.signing import SignatureMismatch, SignedStatement, folder_digest, verify
from serving.engines.engine import Engine, Sampling
from serving.metrics import ServingMetrics
from serving.router import Router, Slot
from serving.swap.adapter_swap import AdapterSwaps, attach, is_adapter_version
from serving.swap.downloads import download_version
from serving.swap.result import SignatureRefused, SwapError
from serving.swap.weight_check import verify_weights

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from liverl.io.registry import ModelRegistry


class VersionLoader:
    def __init__(self, config: ServingConfig, router: Router, metrics: ServingMetrics, registry: ModelRegistry | None,
                 adapters: AdapterSwaps, versions_dir: Path, say: Callable[[str], None]):
        self.config = config
        self.router = router
        self.metrics = metrics
        self.registry = registry  # None when serving a fixed folder
        self.adapters = adapters
        self.versions_dir = Path(versions_dir)
        self.say = say
        self.loaded: set[Slot] = set()  # every slot whose engine this loader started, so close() frees them all

    async def fetch(self, version: str, policy_dir: Path | None = None, canary: bool = False) -> Slot:
        """Download (unless a folder is given) and read the tokenizer: a slot with no engine yet (canary: to serve
        as a canary, check_signed's)."""
        source = str(policy_dir) if policy_dir else ""
        downloaded = policy_dir is None
        try:
            if downloaded:
                policy_dir, source = await asyncio.to_thread(download_version, self.registry, version,
                                                            self.versions_dir)
                await asyncio.to_thread(check_signed, self.registry, version, policy_dir, self.config, canary)
            tokenizer = await asyncio.to_thread(_load_tokenizer, policy_dir)
            slot = Slot(version, None, tokenizer, Path(policy_dir), source)
            if is_adapter_version(slot.policy_dir):  # its weights folder becomes its base's
                champion = self.router.champion
                slot = await self.adapters.prepare(slot, champion)
                if downloaded and (champion is None or slot.policy_dir != champion.policy_dir):  # a base fetched now
                    await asyncio.to_thread(check_signed, self.registry, slot.adapter.base_version, slot.policy_dir,
                                            self.config)
        except SignatureMismatch as error:
            self.metrics.signature_refusals.inc()
            raise SignatureRefused(f"version {version} refused: {error}") from error
        except Exception as error:
            raise SwapError(f"version {version} failed to load: {error}") from error
        return slot

    async def load(self, version: str, policy_dir: Path | None = None, fetched: Slot | None = None,
                   canary: bool = False) -> Slot:
        """Fetch the version (unless given), start an engine of its own, smoke-test it. Raises SwapError."""
        slot = fetched or await self.fetch(version, policy_dir, canary)
        try:
            slot.engine = make_engine(self.config.engine, slot.policy_dir, self.config)
            await slot.engine.start()
            slot.engine = await attach(slot.engine, slot.adapter)
        except Exception as error:
            raise SwapError(f"version {version} failed to load: {error}") from error
        try:
            await self.smoke(slot)
        except Exception as error:
            await slot.engine.shutdown()
            raise SwapError(f"version {version} failed its smoke generation: {error}") from error
        self.loaded.add(slot)
        return slot

    async def smoke(self, slot: Slot, engine: Engine | None = None) -> None:
        """A greedy generation must return finite logprobs, and the engine must reproduce the version's weight
        probe; raises otherwise (the caller keeps the version away from traffic)."""
        engine = engine or slot.engine
        ids = list(slot.tokenizer(self.config.smoke_prompt, add_special_tokens=True)["input_ids"]) or [0]
        sampling = Sampling(temperature=0.0, max_tokens=self.config.smoke_max_tokens)
        tokens, logprobs = [], []
        async for delta in engine.generate(ids, sampling, f"smoke-{slot.version}-{time.time_ns()}"):
            tokens += delta.token_ids
            logprobs += delta.logprobs
        if not tokens or len(tokens) != len(logprobs):
            raise SwapError(f"smoke generation returned {len(tokens)} tokens and {len(logprobs)} logprobs")
        if not all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs):
            raise SwapError(f"smoke generation returned invalid logprobs {logprobs}")
        # An adapter version's probe sits in its adapter folder (measured on base + adapter), not in its base's.
        probed = slot.adapter.path if slot.adapter is not None else slot.policy_dir
        await verify_weights(engine, probed, slot.version, self.config, self.metrics, self.say)


def _load_tokenizer(policy_dir: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(policy_dir)


def check_signed(registry, version: str, folder: Path, config: ServingConfig, canary: bool = False) -> None:
    """Raise SignatureMismatch (saying why) unless `version`, downloaded into `folder`, may be served (canary: as a
    canary, which a deferred version the gate signed for its canary may). Blocking."""
    if not config.require_signature:
        return
    key = config.verify_key_file
    if key is None or not Path(key).is_file():
        raise SignatureMismatch(f"serving.require_signature is on but the trainer's public key {key} is missing: "
                                "copy the trainer's verify.pem there (it is made beside trainer.signing_key_file), "
                                "or set serving.require_signature = false to serve unsigned versions")
    tags = registry.tags(version)
    # The trainer signs "pass" before it moves the alias and writes the decision tag after it: an absent decision, or
    # a "defer" recorded before (a deferred candidate passing later), is a promotion in progress, served only on its
    # "pass" signature; a recorded "fail" (a signed candidate refused after a crash) is never served.
    decision = tags.get(names.TAG_GATE_DECISION, "pass")
    signature = tags.get(names.TAG_SIGNATURE)
    if decision == "defer":
        decision = "pass"
        if canary and signature is None:  # a candidate the gate deferred and serves to its canary share alone
            decision, signature = "canary", tags.get(names.TAG_CANARY_SIGNATURE)
    statement = SignedStatement(registry.name, version, folder_digest(folder), decision)
    verify(statement, signature, Path(key))


def make_engine(kind: str, policy_dir: Path, serving_config: ServingConfig) -> Engine:
    """The engine for one policy folder: "vllm", the light "hf" engine, or "upstream" (the team's own vLLM servers,
    serving.upstream). Each is imported only when chosen (the concrete engines import serving.engine, never this
    module)."""
    if kind == "vllm":
        from serving.engines.vllm_engine import VllmEngine

        return VllmEngine(policy_dir, serving_config)
    if kind == "hf":
        from serving.engines.hf_engine import HfEngine

        return HfEngine(policy_dir)
    if kind == "upstream":
        from serving.engines.upstream.engine import UpstreamEngine

        return UpstreamEngine(policy_dir, serving_config)
    raise ValueError(f"unknown serving.engine {kind!r}: use 'vllm', 'hf' or 'upstream'")
