"""The weight check on the light engine: a version's probe (measured by the trainer's code on the exported model)
is reproduced by an engine running those weights, and refused with a reason when the engine runs other weights, when
the probe is half-written, or when it is missing and required; a missing probe otherwise passes with a count."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from liverl.config.serving import ServingConfig
from liverl.contracts.weight_probe import PROBE_FILE, WeightProbe, read_probe
from serving.engines.hf_engine import HfEngine
from serving.metrics import ServingMetrics
from serving.swap.weight_check import WeightProbeMismatch, tolerance, verify_weights
from tests.serving.probe_versions import with_probe


def _check(engine_dir: Path, folder: Path, config: ServingConfig | None = None) -> tuple[float | None, dict, list]:
    """verify_weights of an hf engine loaded from engine_dir against folder's probe: (result, counts, say lines)."""
    metrics, lines = ServingMetrics(), []

    async def run():
        engine = HfEngine(engine_dir)
        await engine.start()
        try:
            return await verify_weights(engine, folder, "7", config or ServingConfig(engine="hf"), metrics,
                                        lines.append)
        finally:
            await engine.shutdown()

    try:
        result = asyncio.run(run())
    finally:
        counts = {o: metrics.value("liverl_serving_weight_probes_total", {"outcome": o})
                  for o in ("match", "mismatch", "unreadable", "missing")}
    return result, {k: v for k, v in counts.items() if v}, lines


def test_the_exported_weights_reproduce_their_probe(tiny_policy_dir, tmp_path):
    folder = with_probe(tiny_policy_dir, tmp_path / "v")
    worst, counts, _ = _check(folder, folder)
    assert counts == {"match": 1}
    assert worst <= 1e-5  # the same fp32 weights through the same kernels: float noise only
    probe = read_probe(folder)
    assert probe.dtype == "float32" and len(probe.sequences) == 4 and all(len(r) == 15 for r in probe.logprobs)


def test_other_weights_are_refused_with_the_reason(tiny_policy_dir, second_policy_dir, tmp_path):
    folder = with_probe(tiny_policy_dir, tmp_path / "v", probe_of=second_policy_dir)  # weights of another version
    with pytest.raises(WeightProbeMismatch) as refused:
        _check(folder, folder)
    assert "does not reproduce its weight probe" in str(refused.value) and "refused here" in str(refused.value)
    worst = float(str(refused.value).split("|logprob difference| ")[1].split()[0])
    assert worst > 100 * ServingConfig().weight_probe_tolerance_float32, worst


def test_a_half_written_probe_is_refused_not_skipped(tiny_policy_dir, tmp_path):
    folder = with_probe(tiny_policy_dir, tmp_path / "v")
    text = (folder / PROBE_FILE).read_text()
    (folder / PROBE_FILE).write_text(text[: len(text) // 2])
    metrics = ServingMetrics()
    with pytest.raises(WeightProbeMismatch, match="not a readable weight probe"):
        asyncio.run(verify_weights(HfEngine(folder), folder, "7", ServingConfig(engine="hf"), metrics))
    assert metrics.value("liverl_serving_weight_probes_total", {"outcome": "unreadable"}) == 1


def test_a_missing_probe_is_served_with_a_warning_unless_required(tiny_policy_dir, tmp_path):
    worst, counts, lines = _check(tiny_policy_dir, tiny_policy_dir)
    assert worst is None and counts == {"missing": 1} and lines == ["serving weight-probe-missing version=7"]
    metrics = ServingMetrics()
    required = ServingConfig(engine="hf", require_weight_probe=True)
    with pytest.raises(WeightProbeMismatch, match="require_weight_probe"):
        asyncio.run(verify_weights(HfEngine(tiny_policy_dir), tiny_policy_dir, "7", required, metrics))
    assert metrics.value("liverl_serving_weight_probes_total", {"outcome": "missing"}) == 1


class _Scores:
    """An engine whose prompt logprobs are given (the comparison itself, without a model)."""

    def __init__(self, rows):
        self.rows = iter(rows)

    async def prompt_logprobs(self, ids, request_id):
        return next(self.rows)


@pytest.mark.parametrize("got, refused", [([[-1.0, -2.0]], False), ([[-1.0, -2.0005]], False),
                                          ([[-1.0, -2.01]], True), ([[-1.0, math.nan]], True), ([[-1.0]], True)])
def test_the_comparison_allows_noise_only(tmp_path, got, refused):
    WeightProbe(sequences=((3, 4, 5),), logprobs=((-1.0, -2.0),), dtype="float32").write(tmp_path)
    check = verify_weights(_Scores(got), tmp_path, "7", ServingConfig(engine="hf"), ServingMetrics())
    if refused:
        with pytest.raises(WeightProbeMismatch):
            asyncio.run(check)
    else:
        assert asyncio.run(check) <= ServingConfig().weight_probe_tolerance_float32


def test_half_precision_on_either_side_allows_half_noise():
    config = ServingConfig()
    assert tolerance(config, "float32") == (config.weight_probe_tolerance_float32, "float32")
    assert tolerance(config, "bfloat16") == (config.weight_probe_tolerance_half, "half")
    assert tolerance(ServingConfig(dtype="bfloat16"), "float32")[1] == "half"

