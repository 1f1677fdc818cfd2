"""The live canary (trainer/gate/canary.py): its test's error rates on simulated session rewards, its pairing of the
sessions each version served, and the gate worker putting a deferred candidate on the canary alias of a real MLflow
registry, then promoting or refusing it on the sessions served live."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from liverl.config.trainer import GateConfig
from liverl.contracts import names
from tests.trainer.conftest import trainer_config
from trainer.gate.canary import Canary, CanarySettings, CanaryTest
from trainer.gate.served import ServedSession
from trainer.gate.holdout import GateEvidence
from trainer.gate.worker import GateWorker
from trainer.io.base_policy import register_base
from trainer.io.publish import CheckpointPublisher, CheckpointToPublish
from trainer.io.registry import Registry
from trainer.io.state import PendingPublish

STREAMS = 2000
DROP = 0.3  # reward units on [-1, 1]: a win rate 15 points lower


def _simulate(win_candidate: float, win_champion: float, settings: CanarySettings, seed: int) -> dict[str, float]:
    """Share of STREAMS canaries ending in each decision: rewards -1/1, 16 rounds of budget/16 pairs each, judged
    after every round as the worker does (a stream shown worse first and passed later counts as a pass: cautious)."""
    rng = np.random.default_rng(seed)
    test = CanaryTest(settings, (STREAMS,), grid=False)
    per_round = settings.max_sessions // 16
    for _ in range(16):
        candidate = np.where(rng.random((STREAMS, per_round)) < win_candidate, 1.0, -1.0)
        champion = np.where(rng.random((STREAMS, per_round)) < win_champion, 1.0, -1.0)
        verdict = test.observe(candidate - champion)
    return {decision: float(np.mean(verdict.decision == decision)) for decision in ("pass", "fail", "defer")}


def _margin(rate: float) -> float:
    return 3 * (rate * (1 - rate) / STREAMS) ** 0.5  # the simulation's own noise: 3 binomial standard errors


def test_a_candidate_worse_by_the_drop_is_promoted_at_most_max_false_promotion_of_the_time():
    settings = CanarySettings(DROP, 0.05, 0.20, 512)
    rates = _simulate(0.5 - DROP / 2, 0.5, settings, seed=0)  # expected reward -DROP against 0
    assert rates["pass"] <= settings.max_false_promotion + _margin(settings.max_false_promotion)


def test_an_equal_candidate_is_refused_at_most_max_false_refusal_of_the_time():
    settings = CanarySettings(DROP, 0.05, 0.20, 512)
    rates = _simulate(0.5, 0.5, settings, seed=1)
    assert rates["fail"] <= settings.max_false_refusal + _margin(settings.max_false_refusal)
    assert rates["defer"] == 0.0  # the budget ends every canary


def test_sessions_are_paired_next_to_each_other_in_end_order_and_never_taken_twice():
    canary = Canary("2", "1", started_ms=100, test=CanaryTest(CanarySettings(0.5, 0.05, 0.2, 64)))
    served = [ServedSession("t/old", "2", 50, 1.0),  # ended before the canary began
              ServedSession("t/other", "7", 110, 1.0),  # served by neither
              ServedSession("t/a", "1", 120, -1.0), ServedSession("t/b", "1", 130, 0.0),  # a's left out: b is later
              ServedSession("t/c", "2", 140, 3.0),  # paired with b; clipped to 1
              ServedSession("t/d", "2", 150, 1.0)]
    verdict = canary.take(served)
    assert int(verdict.pairs) == 1 and float(verdict.change) == 1.0 and canary.clipped == 1
    assert canary.waiting.key == "t/d" and canary.sessions == {"1": 2, "2": 2}
    verdict = canary.take([*served, ServedSession("t/e", "1", 160, 0.5)])  # the round's snapshot holds them all
    assert int(verdict.pairs) == 2 and float(verdict.change) == pytest.approx((1.0 + 0.5) / 2)


# -- the worker and the publisher on a real registry ----------------------------------------------------------------

DRIFT_OK = {"ok": True, "flags": [], "notes": []}


def _setup(stack, tiny_policy_dir: Path, tmp_path: Path, canary_alias: str | None = "canary"):
    config = trainer_config(stack, tmp_path)
    config.trainer.gate.canary_alias = canary_alias
    base = register_base(config, tiny_policy_dir, say=lambda *_: None)
    registry = Registry(config.mlflow)
    lines: list[str] = []
    publisher = CheckpointPublisher(registry, config.trainer.gate, config.trainer.loss, config.rewards.monitors,
                                    config.trainer.max_seq_len, config.rewards.version, tmp_path / "downloads",
                                    say=lines.append)
    return config, base, registry, publisher, lines


def _submit(worker: GateWorker, publisher: CheckpointPublisher, folder: Path, base: str, tag: str,
            evidence: GateEvidence) -> str:
    pending = PendingPublish(tag, [0], {"events": {"0": [0, 10]}}, 4, ["rewards-v1"], {})
    checkpoint = CheckpointToPublish(pending, "run-canary", base, 1, folder, evidence)
    version = publisher.register(checkpoint)
    worker.submit(version, checkpoint)
    assert worker.drain(timeout_s=120)
    return version


def _live(candidate: str, champion: str, candidate_reward: float, champion_reward: float, pairs: int = 20
          ) -> tuple[ServedSession, ...]:
    """Sessions ended from now on, the two versions' alternating in end order."""
    now = int(time.time() * 1000) + 1000
    return tuple(ServedSession(f"demo/s{i}", candidate if i % 2 else champion, now + i,
                               candidate_reward if i % 2 else champion_reward) for i in range(2 * pairs))


@pytest.mark.parametrize("better", [True, False])
def test_a_deferred_candidate_goes_live_and_the_canary_decides(stack, tiny_policy_dir, tmp_path, better):
    config, base, registry, publisher, lines = _setup(stack, tiny_policy_dir, tmp_path)
    worker = GateWorker(publisher, say=lines.append)
    try:
        # No held-out session: the reward test defers, and the candidate goes on the canary alias.
        deferred = _submit(worker, publisher, tiny_policy_dir, base, "step-1", GateEvidence((), (), (), (), DRIFT_OK))
        assert registry.tags(deferred)[names.TAG_GATE_DECISION] == "defer"
        assert registry.alias_version("canary") == deferred and registry.alias_version("champion") == base
        # The next round's snapshot shows the sessions each served; its own candidate fails (no drift report), so no
        # new canary follows.
        served = _live(deferred, base, 1.0 if better else -1.0, -1.0 if better else 1.0)
        newer = _submit(worker, publisher, tiny_policy_dir, base, "step-2",
                        GateEvidence((), (), (), (), None, served=served))
        results = {(r.version, r.decision) for r in worker.finished()}
    finally:
        worker.close()
    assert registry.tags(newer)[names.TAG_GATE_DECISION] == "fail"
    tags = registry.tags(deferred)
    report = json.loads(tags[names.TAG_GATE_REPORT])
    assert "canary" not in registry.aliases()  # removed either way
    assert "decided by the live canary: " in report["figures"]["decided_by"]
    assert "candidate-served and" in report["figures"]["decided_by"]
    assert report["figures"]["holdout_trajectories"] == 0  # the deferral's figures are kept beside the canary's
    if better:
        assert tags[names.TAG_GATE_DECISION] == "pass" and (deferred, "pass") in results
        assert registry.alias_version("champion") == deferred and report["figures"]["canary_lower"] > -0.5
        assert report["figures"]["decided_by"].startswith("promoted: ")
    else:
        assert tags[names.TAG_GATE_DECISION] == "fail" and (deferred, "fail") in results
        assert registry.alias_version("champion") == base and report["figures"]["canary_upper"] < 0
        assert "shown worse" in report["reasons"][0]


def test_a_tenant_without_a_champion_of_its_own_gets_a_canary_against_the_shared_one(stack, tiny_policy_dir,
                                                                                       tmp_path):
    # Serving gives such a tenant the shared champion; its first candidate goes live against that, and its pass makes
    # the candidate the tenant's first champion (compare-and-set on the tenant's alias, still unset).
    config, base, registry, _, lines = _setup(stack, tiny_policy_dir, tmp_path)
    publisher = CheckpointPublisher(registry, config.trainer.gate, config.trainer.loss, config.rewards.monitors,
                                    config.trainer.max_seq_len, config.rewards.version, tmp_path / "downloads",
                                    say=lines.append, tenant="acme")
    worker = GateWorker(publisher, say=lines.append)
    try:
        deferred = _submit(worker, publisher, tiny_policy_dir, base, "step-1", GateEvidence((), (), (), (), DRIFT_OK))
        assert registry.alias_version("canary-acme") == deferred, lines
        assert registry.alias_version(names.tenant_champion_alias("acme")) is None
        _submit(worker, publisher, tiny_policy_dir, base, "step-2",
                GateEvidence((), (), (), (), None, served=_live(deferred, base, 1.0, -1.0)))
    finally:
        worker.close()
    assert registry.alias_version(names.tenant_champion_alias("acme")) == deferred
    assert registry.alias_version(names.ALIAS_CHAMPION) == base and "canary-acme" not in registry.aliases()
    assert any(f"live canary started on canary-acme against v{base} (the shared champion" in line for line in lines)
    report = json.loads(registry.tags(deferred)[names.TAG_GATE_REPORT])
    assert report["champion"] == base and report["alias_champion"] is None
    assert report["figures"]["decided_by"].startswith("promoted: decided by the live canary")


def test_the_canary_is_off_by_default(stack, tiny_policy_dir, tmp_path):
    assert GateConfig().canary_alias is None
    config, base, registry, publisher, lines = _setup(stack, tiny_policy_dir, tmp_path, canary_alias=None)
    worker = GateWorker(publisher, say=lines.append)
    try:
        deferred = _submit(worker, publisher, tiny_policy_dir, base, "step-1", GateEvidence((), (), (), (), DRIFT_OK))
    finally:
        worker.close()
    assert registry.tags(deferred)[names.TAG_GATE_DECISION] == "defer"
    assert set(registry.aliases()) == {"candidate", "champion"} and not any("canary" in line for line in lines)


def test_served_sessions_keep_whole_sessions_of_one_version_with_their_mean_reward():
    from liverl.config import LiverlConfig
    from liverl.rewards import mix
    from trainer.gate.served import served_sessions

    rewards = LiverlConfig().rewards

    def row(session, versions, end, outcome, **extra):
        return {"session_id": session, "tenant_id": "acme", "trajectory_id": f"{session}-{outcome}",
                "policy_versions": versions, "session_end_ms": end, "reward_components": {"outcome": outcome},
                "task_family": "", "loss_mask": [0, 1, 1], **extra}

    rows = [row("s1", ["2"], 10, 1.0), row("s1", ["2"], 12, 0.0),  # an orchestrator and its sub-agent
            row("s2", ["1"], 20, 1.0), row("s2", ["2"], 20, 1.0),  # served by two versions: left out
            row("s3", ["1"], None, 1.0),  # no end recorded
            row("s4", ["1"], 30, 1.0, origin="import:sharegpt")]  # not served here
    (session,) = served_sessions(rows, 0, rewards)
    expected = np.mean([mix({"outcome": o}, "", 0, rewards, num_policy_tokens=2) for o in (1.0, 0.0)])
    assert (session.key, session.version, session.ended_ms) == ("acme/s1", "2", 12)
    assert session.reward == pytest.approx(expected)
