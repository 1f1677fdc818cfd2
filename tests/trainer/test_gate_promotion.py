"""Promotion against the real MLflow registry: the decision and the alias move are one recoverable step (a crash
anywhere in it never leaves the serving champion tagged "fail"), and it is compare-and-set (a candidate judged
against a champion that is no longer champion is judged again or refused, under the registry's promotion lease)."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from liverl.contracts import names
from liverl.io.lease import RegistryLease
from trainer.gate.promotion import GateReport
from trainer.io.publish import CheckpointPublisher
from trainer.io.registry import TAG_CHECKPOINT, Registry

RUN = "run-a"


class Crash(BaseException):
    """The trainer process dying at a chosen registry write (BaseException: nothing in the gate catches it)."""


class CrashingRegistry(Registry):
    """The real registry, but the process 'dies' right before the write that `crash_at` names."""

    def __init__(self, config, crash_at: tuple[str, str]):
        super().__init__(config)
        self.crash_at = crash_at

    def set_alias(self, alias, version):
        if self.crash_at == ("alias", alias):
            raise Crash(f"killed before pointing {alias} at v{version}")
        super().set_alias(alias, version)

    def set_tag(self, version, key, value):
        if self.crash_at == ("tag", key):
            raise Crash(f"killed before tagging v{version} with {key}")
        super().set_tag(version, key, value)


class Judged(CheckpointPublisher):
    """A publisher whose evaluation (tested in test_gate.py) is replaced by a verdict; `during` runs inside it, as
    another trainer would act while this one judges. Promotion, its lease and its recovery are the real ones."""

    def __init__(self, registry: Registry, gate: GateConfig | None = None, decision: str = "pass", during=None):
        super().__init__(registry, gate or GateConfig(), LossConfig(), MonitorsConfig(), 64, "rewards-v1",
                         download_dir=Path("/nonexistent"), say=lambda _: None)
        self.decision, self.during = decision, during
        self.judged_against: list[str | None] = []

    def report(self, version, champion, checkpoint) -> GateReport:
        self.judged_against.append(champion)
        if self.during is not None:
            self.during(len(self.judged_against))
        reasons = [] if self.decision == "pass" else ["kl 1.0 exceeds 0.5"]
        return GateReport(self.decision, reasons, {"kl": 0.01})


@pytest.fixture
def model(stack, tiny_policy_dir):
    """A registered model: v1 the champion, v2 a candidate of run RUN, v3 another run's version."""
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"policy-{uuid.uuid4().hex[:8]}"
    registry = Registry(config.mlflow)
    base = registry.register(tiny_policy_dir, {names.TAG_GATE_DECISION: "pass"}, "base")
    candidate = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: f"{RUN}/step-1"}, "step-1")
    other = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: "run-b/step-1"}, "other")
    assert (base, candidate, other) == ("1", "2", "3")
    registry.set_alias(names.ALIAS_CHAMPION, base)
    return config


def _report(registry: Registry, version: str) -> dict:
    return json.loads(registry.tags(version)[names.TAG_GATE_REPORT])


def test_a_crash_after_the_alias_moved_leaves_the_champion_promoted_not_tagged_fail(model):
    crashing = CrashingRegistry(model.mlflow, crash_at=("tag", names.TAG_GATE_DECISION))
    with pytest.raises(Crash):
        Judged(crashing).judge("2", checkpoint=None)
    registry = Registry(model.mlflow)
    assert registry.alias_version(names.ALIAS_CHAMPION) == "2"  # it serves already
    assert names.TAG_GATE_DECISION not in registry.tags("2")

    settled = Judged(registry).refuse_unjudged(RUN)  # the next start's clean-up
    assert settled == []  # nothing refused: the promotion is finished instead
    tags = registry.tags("2")
    assert tags[names.TAG_GATE_DECISION] == "pass" and registry.alias_version(names.ALIAS_CHAMPION) == "2"


def test_a_crash_before_the_alias_moved_is_finished_on_restart_when_the_champion_is_unchanged(model):
    with pytest.raises(Crash):
        Judged(CrashingRegistry(model.mlflow, crash_at=("alias", names.ALIAS_CHAMPION))).judge("2", checkpoint=None)
    registry = Registry(model.mlflow)
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"
    assert Judged(registry).refuse_unjudged(RUN) == []
    assert registry.alias_version(names.ALIAS_CHAMPION) == "2"
    assert registry.tags("2")[names.TAG_GATE_DECISION] == "pass" and _report(registry, "2")["champion"] == "1"


def test_a_crash_before_the_alias_moved_is_refused_on_restart_when_the_champion_moved_meanwhile(model):
    with pytest.raises(Crash):
        Judged(CrashingRegistry(model.mlflow, crash_at=("alias", names.ALIAS_CHAMPION))).judge("2", checkpoint=None)
    registry = Registry(model.mlflow)
    registry.set_alias(names.ALIAS_CHAMPION, "3")  # another trainer promoted v3 meanwhile
    assert Judged(registry).refuse_unjudged(RUN) == ["2"]
    assert registry.alias_version(names.ALIAS_CHAMPION) == "3"
    assert registry.tags("2")[names.TAG_GATE_DECISION] == "fail"
    [reason] = _report(registry, "2")["reasons"]
    assert "judged against v1" in reason and "now v3" in reason


def test_the_serving_champion_is_never_refused(model):
    registry = Registry(model.mlflow)
    registry.set_alias(names.ALIAS_CHAMPION, "2")  # champion without any gate record (set by hand)
    result = Judged(registry).refuse("2", "superseded by v4 before its turn")
    assert result.decision == "pass" and registry.tags("2")[names.TAG_GATE_DECISION] == "pass"
    assert registry.alias_version(names.ALIAS_CHAMPION) == "2"


def test_a_candidate_refused_unjudged_is_marked_so(model):
    registry = Registry(model.mlflow)
    registry.set_alias(names.ALIAS_CHAMPION, "1")
    result = Judged(registry).refuse("2", "superseded by v4 before its turn")
    assert result.decision == "fail" and not result.judged  # the trainer counts no refusal for it (trainer/loop.py)
    assert registry.tags("2")[names.TAG_GATE_DECISION] == "fail"
    assert _report(registry, "2")["reasons"] == ["superseded by v4 before its turn"]
    assert _report(registry, "2")["judged"] is False  # what the demo's summary reads (demo/gate_summary.py)


def test_a_candidate_judged_against_a_champion_that_moved_is_judged_again(model):
    registry = Registry(model.mlflow)

    def another_trainer_promotes(call: int) -> None:
        if call == 1:
            registry.set_alias(names.ALIAS_CHAMPION, "3")

    publisher = Judged(registry, during=another_trainer_promotes)
    result = publisher.judge("2", checkpoint=None)
    assert publisher.judged_against == ["1", "3"]  # judged again, against the champion of the moment
    assert result.promoted and registry.alias_version(names.ALIAS_CHAMPION) == "2"
    assert _report(registry, "2")["champion"] == "3"


def test_a_candidate_whose_champion_keeps_moving_is_refused_with_the_reason(model):
    registry = Registry(model.mlflow)
    moves = iter(["3", "1", "3"])

    def another_trainer_promotes(call: int) -> None:
        registry.set_alias(names.ALIAS_CHAMPION, next(moves))

    publisher = Judged(registry, during=another_trainer_promotes)  # one new judgement (gate.rejudges = 1)
    result = publisher.judge("2", checkpoint=None)
    assert not result.promoted and result.decision == "fail"
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"  # the other trainer's last move stands
    assert "no longer champion" in result.reasons[0] and registry.tags("2")[names.TAG_GATE_DECISION] == "fail"


def test_the_promotion_waits_for_the_lease_and_refuses_when_another_trainer_keeps_it(model):
    from trainer.io.publish import PROMOTION_LEASE

    registry = Registry(model.mlflow)
    other = RegistryLease(registry, PROMOTION_LEASE, owner="trainer-b", ttl_s=60.0)
    assert other.try_acquire()
    try:
        publisher = Judged(registry, GateConfig(promotion_lease_wait_s=1.0))
        result = publisher.judge("2", checkpoint=None)
    finally:
        other.release()
    assert result.decision == "fail" and "promotion lease" in result.reasons[0] and "trainer-b" in result.reasons[0]
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"


def test_two_trainers_promoting_at_once_never_lose_an_update(model):
    """Both candidates pass against v1 at the same moment: the lease orders the promotions, and the second one is
    judged again against the first instead of overwriting it on a comparison with v1."""
    registry = Registry(model.mlflow)
    both_judged = threading.Barrier(2, timeout=60)

    def judged_together(call: int) -> None:
        if call == 1:
            both_judged.wait()

    publishers = {version: Judged(Registry(model.mlflow), during=judged_together) for version in ("2", "3")}
    results = {}
    threads = [threading.Thread(target=lambda v=v, p=p: results.update({v: p.judge(v, checkpoint=None)}))
               for v, p in publishers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(result.promoted for result in results.values())
    first, second = sorted(results, key=lambda v: len(publishers[v].judged_against))
    assert publishers[first].judged_against == ["1"] and publishers[second].judged_against == ["1", first]
    assert registry.alias_version(names.ALIAS_CHAMPION) == second
    assert (_report(registry, first)["champion"], _report(registry, second)["champion"]) == ("1", first)


def test_a_deferred_candidate_is_neither_promoted_nor_refused(model):
    registry = Registry(model.mlflow)
    result = Judged(registry, decision="defer").judge("2", checkpoint=None)
    assert result.deferred and not result.promoted and result.decision == "defer"
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"
    assert registry.tags("2")[names.TAG_GATE_DECISION] == "defer" and _report(registry, "2")["decision"] == "defer"
    assert Judged(registry).refuse_unjudged(RUN) == []  # a restart does not refuse it: it was judged
    assert Judged(registry).settle("2").decision == "defer"  # and not judged twice on the same evidence
