"""Proof that a replica serves the weights the trainer exported, checked after every load or swap and before the
version takes traffic.

The trainer's export leaves a weight probe in the version's folder (liverl/contracts/weight_probe.py): the logprobs
its model gave a fixed set of token sequences. The engine scores the same sequences (raw prompt logprobs); a
difference beyond float noise means the replica runs other weights than the exported ones (a wrong or half-written
weights file, a head left stale by an in-place reload), and the version is refused on this replica: the caller
rolls it back. A folder without a probe (versions exported before probes existed) is served with a warning,
unless serving.require_weight_probe is set.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Protocol

from liverl.config.serving import ServingConfig
from liverl.contracts.weight_probe import PROBE_FILE, WeightProbe, has_probe, read_probe
from serving.metrics import ServingMetrics

log = logging.getLogger("liverl.serving.weight_check")

HALF_PRECISIONS = {"bfloat16", "float16"}


class WeightProbeMismatch(RuntimeError):
    """The engine does not reproduce the version's weight probe (or the probe is unreadable, or required and absent)."""


class Scorer(Protocol):
    async def prompt_logprobs(self, prompt_token_ids: list[int], request_id: str) -> list[float]: ...


def tolerance(config: ServingConfig, probe_dtype: str) -> tuple[float, str]:
    """The largest |logprob difference| float noise explains, and the precision it is for: the coarser of the
    engine's dtype and the dtype the trainer measured in ("auto" may load half precision: the coarser too)."""
    if config.dtype in HALF_PRECISIONS or config.dtype == "auto" or probe_dtype in HALF_PRECISIONS:
        return config.weight_probe_tolerance_half, "half"
    return config.weight_probe_tolerance_float32, "float32"


async def verify_weights(engine: Scorer, policy_dir: Path, version: str, config: ServingConfig,
                         metrics: ServingMetrics, say=print) -> float | None:
    """Check the engine against the folder's weight probe: the largest |logprob difference| when it matches,
    None when the folder has no probe (served with a warning). WeightProbeMismatch when it must be refused."""
    if not has_probe(policy_dir):
        metrics.weight_probes.labels("missing").inc()
        if config.require_weight_probe:
            raise WeightProbeMismatch(f"version {version} has no {PROBE_FILE} and serving.require_weight_probe is "
                                      "set: re-export it with a trainer that writes the probe, or unset the option")
        log.warning("version %s has no %s: serving it unchecked (exported before weight probes?)", version, PROBE_FILE)
        say(f"serving weight-probe-missing version={version}")
        return None
    try:
        probe = read_probe(policy_dir)
    except ValueError as error:
        metrics.weight_probes.labels("unreadable").inc()
        raise WeightProbeMismatch(f"version {version}: {error}") from error
    allowed, precision = tolerance(config, probe.dtype)
    worst = await _largest_difference(engine, probe, version)
    if worst > allowed:
        metrics.weight_probes.labels("mismatch").inc()
        message = (f"version {version} does not reproduce its weight probe: max |logprob difference| {worst:.3g} over "
                   f"{sum(len(r) for r in probe.logprobs)} probe tokens, where {precision} noise stays under "
                   f"{allowed:.3g}. This replica runs other weights than the trainer exported (a wrong or half-written "
                   "weights file, or a head an in-place reload left stale): refused here")
        log.error(message)
        raise WeightProbeMismatch(message)
    metrics.weight_probes.labels("match").inc()
    log.info("version %s reproduces its weight probe (max |logprob difference| %.3g, %s tolerance %.3g)",
             version, worst, precision, allowed)
    return worst


async def _largest_difference(engine: Scorer, probe: WeightProbe, version: str) -> float:
    worst = 0.0
    for i, (ids, expected) in enumerate(zip(probe.sequences, probe.logprobs)):
        try:
            got = await engine.prompt_logprobs(list(ids), f"weight-probe-{version}-{i}-{time.time_ns()}")
        except Exception as error:  # ids the model cannot take: the probe is another model's, or the weights are
            raise WeightProbeMismatch(f"version {version}: the engine could not score its weight probe "
                                      f"({type(error).__name__}: {error}): refused here") from error
        if len(got) != len(expected):
            raise WeightProbeMismatch(f"version {version}: the engine scored {len(got)} probe tokens of "
                                      f"{len(expected)}: refused here")
        worst = max([worst, *(abs(a - b) if math.isfinite(a) else math.inf for a, b in zip(got, expected))])
    return worst
