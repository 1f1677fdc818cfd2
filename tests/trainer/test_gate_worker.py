"""The gate beside training: candidates are judged one at a time, in order, on a thread; one still waiting when
a newer one arrives is refused unjudged; a failing judgement never stops the trainer; and after a stop, the
versions left undecided are refused at the next start so that every version carries a decision."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from liverl.contracts import names
from liverl.config.trainer import GateConfig
from tests.trainer.conftest import trainer_config
from trainer.gate.holdout import GateEvidence
from trainer.gate.worker import GateWorker
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.publish import PublishResult
from trainer.io.registry import TAG_CHECKPOINT, Registry


class SlowJudge:
    """The CheckpointPublisher calls the worker makes; decide() waits for `release` so a judgement is seen running.
    The champion stays v1."""

    gate = GateConfig()
    champion_alias = names.ALIAS_CHAMPION

    def __init__(self):
        self.release = threading.Event()
        self.started: list[str] = []
        self.refused: list[tuple[str, str]] = []
        self.registry = self

    def alias_version(self, alias):
        return "1"

    def decide(self, version, checkpoint):
        self.started.append(version)
        assert self.release.wait(30)
        if checkpoint.folder.name == "broken":
            raise ConnectionError("registry down")
        return PublishResult(version, "pass", (), version)

    def refuse(self, version, reason):
        self.refused.append((version, reason))
        return PublishResult(version, "fail", (reason,), "1")


@dataclass(frozen=True)
class Candidate:
    """What the worker reads of a CheckpointToPublish: its folder and its evidence."""

    name: str
    evidence: GateEvidence = GateEvidence((), (), (), (), None)
    folder: Path | None = None  # /exports/<name> unless given

    def __post_init__(self) -> None:
        if self.folder is None:
            object.__setattr__(self, "folder", Path("/exports") / self.name)


def test_candidates_are_judged_in_order_and_a_waiting_one_is_superseded():
    judge = SlowJudge()
    worker = GateWorker(judge, say=lambda line: None)
    try:
        worker.submit("2", Candidate("step-1"))
        assert not worker.drain(timeout_s=0.5)  # v2 is being judged and waits for release
        worker.submit("3", Candidate("step-2"))  # waits behind v2
        assert worker.in_use() == {Path("/exports/step-1"), Path("/exports/step-2")}
        worker.submit("4", Candidate("step-3"))  # supersedes v3, which was never started
        assert judge.refused == [("3", "superseded by v4 before its turn")]
        judge.release.set()
        assert worker.drain(timeout_s=30)
        results = worker.finished()
        assert [(r.version, r.decision) for r in results] == [("3", "fail"), ("2", "pass"), ("4", "pass")]
        assert judge.started == ["2", "4"] and worker.in_use() == set() and worker.finished() == []
    finally:
        worker.close()


def test_a_judgement_that_fails_is_a_refusal_and_the_worker_goes_on():
    judge, lines = SlowJudge(), []
    judge.release.set()
    worker = GateWorker(judge, say=lines.append)
    try:
        worker.submit("2", Candidate("broken"))
        assert worker.drain(timeout_s=30)
        worker.submit("3", Candidate("step-2"))
        assert worker.drain(timeout_s=30)
        results = worker.finished()
    finally:
        worker.close()
    assert [(r.version, r.decision) for r in results] == [("2", "fail"), ("3", "pass")]
    assert "registry down" in results[0].reasons[0] and results[0].champion is None
    assert "gate v2 could not finish (ConnectionError: registry down)" in lines[0]


def test_a_drop_of_the_whole_reward_range_judges_without_a_sequential_test():
    # A permissive gate (max_reward_drop 1e6, as loop tests set it) turns the reward test off; the worker once built
    # its accumulator anyway, which refused such a drop, and the exception killed the gate thread: every later
    # candidate was then "superseded" unjudged.
    judge = SlowJudge()
    judge.gate = GateConfig(max_reward_drop=1e6)
    judge.release.set()
    worker = GateWorker(judge, say=lambda line: None)
    try:
        for version in ("2", "3"):
            worker.submit(version, Candidate(f"step-{version}"))
            assert worker.drain(timeout_s=30)
        results = worker.finished()
    finally:
        worker.close()
    assert [(r.version, r.decision) for r in results] == [("2", "pass"), ("3", "pass")]


@pytest.mark.slow
def test_versions_a_stopped_trainer_left_undecided_are_refused_at_the_next_start(stack, tiny_policy_dir, tmp_path):
    from trainer.loop import Trainer

    config = trainer_config(stack, tmp_path)
    register_base(config, tiny_policy_dir, say=lambda *_: None)
    trainer = Trainer(config, say=lambda *_: None)
    trainer.start()
    registry = Registry(config.mlflow)
    run_key = trainer.state.groups[SHARED_GROUP].run_key
    undecided = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: f"{run_key}/step-1"}, "step-1")
    decided = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: f"{run_key}/step-2",
                                                  names.TAG_GATE_DECISION: "pass"}, "step-2")
    pending = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: f"{run_key}/step-3"}, "step-3")
    other_run = registry.register(tiny_policy_dir, {TAG_CHECKPOINT: "another-run/step-1"}, "another")
    trainer.close()

    refused = trainer.groups[SHARED_GROUP].publisher.refuse_unjudged(run_key, keep=f"{run_key}/step-3")
    assert refused == [undecided]
    tags = registry.tags(undecided)
    assert tags[names.TAG_GATE_DECISION] == "fail" and "trainer stopped" in tags[names.TAG_GATE_REPORT]
    assert registry.tags(decided)[names.TAG_GATE_DECISION] == "pass"
    assert names.TAG_GATE_DECISION not in registry.tags(pending)  # the restart finishes it through its gate
    assert names.TAG_GATE_DECISION not in registry.tags(other_run)  # not this run's to judge
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"


NOISY_WEIGHTS = np.array([0.2, 1.8, 1.8, 0.2])  # mean 1 on each reward (sessions alternate -1, +1): an equal candidate


class SequentialJudge:
    """A publisher whose every look feeds the candidate's own sequential test with an identical candidate's sessions
    (weights 1: it passes once enough sessions accumulate), as evaluate() does with the held-out scores."""

    gate = GateConfig(max_reward_drop=0.5)  # the demo's: an identical candidate passes after about 20 sessions
    champion_alias = names.ALIAS_CHAMPION

    def __init__(self, noisy: frozenset[str] = frozenset()):
        self.looks: list[tuple[str, list[str]]] = []  # (version, the session ids each look consumed)
        self.registry = self  # alias_version: the champion stays v1 unless a candidate passes
        self.champion = "1"
        self.noisy = noisy  # versions far from the served policy (NOISY_WEIGHTS): equal, not shown so on a few dozen
        self.decisions: dict[str, str] = {}  # the gate decision recorded on each version
        self.download_dir = Path("/nonexistent")

    def alias_version(self, alias):
        return self.champion

    def download(self, version, cache_dir):
        raise ConnectionError("the registry is down")

    def tags(self, version):
        decided = {names.TAG_GATE_DECISION: self.decisions[version]} if version in self.decisions else {}
        return {TAG_CHECKPOINT: f"run/{version}", **decided}

    def decide(self, version, checkpoint):
        return self.judge(version, checkpoint)

    def judge(self, version, checkpoint):
        accumulator = checkpoint.evidence.sequential
        ids = [trajectory.trajectory_id for trajectory in checkpoint.evidence.holdout]
        fresh = accumulator.new_sessions(ids)
        rewards = np.asarray(checkpoint.evidence.rewards)[fresh]
        candidate = np.log(NOISY_WEIGHTS[np.arange(len(fresh)) % 4]) if version in self.noisy else np.zeros(len(fresh))
        verdict = accumulator.look(candidate, np.zeros(len(fresh)), rewards, [ids[i] for i in fresh])
        self.looks.append((version, [ids[i] for i in fresh]))
        if verdict.decision == "pass":
            self.champion = version
        self.decisions[version] = str(verdict.decision)
        return PublishResult(version, str(verdict.decision), (), self.champion)

    def refuse(self, version, reason):
        return PublishResult(version, "fail", (reason,), self.champion)


def _recent(start: int, count: int = 16) -> GateEvidence:
    """The most recent `count` held-out sessions at a round: session ids start .. start + count - 1."""
    holdout = tuple(SimpleNamespace(trajectory_id=f"s{i}") for i in range(start, start + count))
    return GateEvidence(holdout, (), tuple(1.0 if i % 2 else -1.0 for i in range(start, start + count)), (), None)


def test_a_deferred_candidate_is_looked_at_again_on_each_rounds_new_sessions():
    judge = SequentialJudge()
    worker = GateWorker(judge, say=lambda line: None)
    try:
        for round_ in range(4):  # each round a newer candidate, judged on the 16 most recent held-out sessions
            worker.submit(str(round_ + 2), Candidate(f"step-{round_}", _recent(4 * round_)))
            assert worker.drain(timeout_s=30)
    finally:
        worker.close()
    first = [ids for version, ids in judge.looks if version == "2"]
    # v2's first look took 16 sessions; each later round only the 4 it had not seen, never one twice
    assert first[0] == [f"s{i}" for i in range(16)] and all(len(ids) == 4 for ids in first[1:])
    assert len({s for ids in first for s in ids}) == sum(len(ids) for ids in first)
    results = [(r.version, r.decision) for r in worker.finished()]
    # its evidence accumulated until the identical candidate passed (16 + 4 sessions); then the next deferred one's
    # test opened (v4) and passed the same way
    assert results[:3] == [("2", "defer"), ("3", "defer"), ("2", "pass")] and len(first) == 2
    assert ("4", "pass") in results and judge.champion == "4"


def _pool(start: int, stop: int) -> GateEvidence:
    """The held-out sessions s<start> .. s<stop - 1>, the most recent ones of a round."""
    return _recent(start, stop - start)


def _rounds(judge: SequentialJudge, rounds, say=lambda line: None) -> GateWorker:
    """Each round one newer candidate judged on its pool, the worker drained before the next."""
    worker = GateWorker(judge, say=say)
    try:
        for version, pool in rounds:
            worker.submit(version, Candidate(f"step-{version}", pool))
            assert worker.drain(timeout_s=30)
    finally:
        worker.close()
    return worker


def _look_sizes(judge: SequentialJudge) -> list[tuple[str, int]]:
    return [(version, len(ids)) for version, ids in judge.looks]


def test_early_in_a_run_the_newer_candidate_takes_over_the_open_test():
    # Early in a run the held-out pool is small: v2 is deferred on 4 sessions, v3 on 8 (v2 has also seen 8 by then, the
    # same ones: as far toward a pass). v3, trained on more, goes on; v2 keeps its "defer". v3 then passes once 20
    # sessions accumulated (here 8 + 12).
    said: list[str] = []
    judge = SequentialJudge()
    worker = _rounds(judge, (("2", _pool(0, 4)), ("3", _pool(0, 8)), ("4", _pool(4, 20))), say=said.append)
    looks = _look_sizes(judge)
    assert looks == [("2", 4), ("3", 8), ("2", 4), ("4", 16), ("3", 12)], looks
    results = [(r.version, r.decision) for r in worker.finished()]
    assert results == [("2", "defer"), ("3", "defer"), ("2", "defer"), ("4", "defer"), ("3", "pass")], results
    assert judge.champion == "3"
    assert any(line.startswith("gate v3: its sequential test goes on instead of v2's, which stays deferred") and
               line.endswith("(log capital toward a pass 1.23 on 8 sessions against 1.23 on 8)") for line in said), said


@pytest.mark.parametrize("noisy, rounds, looks, champion", [
    # v2 (equal, but far from the served policy: noisy weights) holds the test on 20 sessions; v3, identical to the
    # champion, comes further toward a pass on 16, so its test goes on and passes at 20; v2 stays deferred.
    ({"2", "4"}, (("2", (0, 16)), ("3", (4, 20)), ("4", (8, 24))),
     [("2", 16), ("3", 16), ("2", 4), ("4", 16), ("3", 4)], "3"),
    # v2 (identical) on 12 sessions has come further than v3 (noisy) on as many: v2's test goes on and passes at 20;
    # a rule by session counts alone would have switched to v3.
    ({"3", "4"}, (("2", (0, 8)), ("3", (0, 12)), ("4", (4, 20))),
     [("2", 8), ("3", 12), ("2", 4), ("4", 16), ("2", 8)], "2"),
], ids=["an-open-test-that-looks-worse-gives-way", "an-open-test-closer-to-a-pass-keeps-going"])
def test_the_open_test_goes_to_the_candidate_closest_to_a_pass(noisy, rounds, looks, champion):
    judge = SequentialJudge(noisy=frozenset(noisy))
    _rounds(judge, [(version, _pool(*sessions)) for version, sessions in rounds])
    assert _look_sizes(judge) == looks, _look_sizes(judge)
    assert judge.champion == champion


def _round(judge: SequentialJudge, version: str, pool: GateEvidence, state_file: Path, folder: Path,
           said: list[str]) -> list[tuple[str, str]]:
    """One trainer start: a worker on state_file judges one candidate, then stops."""
    worker = GateWorker(judge, said.append, state_file)
    try:
        worker.submit(version, Candidate(f"step-{version}", pool, folder / version))
        assert worker.drain(timeout_s=30)
    finally:
        worker.close()
    return [(r.version, r.decision) for r in worker.finished()]


def test_a_restart_takes_the_open_test_up_where_it_stopped(tmp_path):
    # v2 deferred on 16 sessions; the trainer restarts; the next round's 4 new sessions complete v2's 20 and it passes.
    # Without the saved test, v2 would stay deferred for good and v3 start over on 16.
    state, said, judge = tmp_path / "gate" / "open-test-_shared.json", [], SequentialJudge()
    (tmp_path / "2").mkdir()
    assert _round(judge, "2", _pool(0, 16), state, tmp_path, said) == [("2", "defer")]
    saved = json.loads(state.read_text())
    assert saved["version"] == "2" and len(saved["accumulator"]["seen"]) == 16
    assert _round(judge, "3", _pool(4, 20), state, tmp_path, said) == [("3", "defer"), ("2", "pass")]
    assert _look_sizes(judge) == [("2", 16), ("3", 16), ("2", 4)]  # s16..s19 only: none consumed twice
    assert judge.champion == "2" and not state.exists()  # decided: nothing left to take up
    assert any(line.startswith("gate v2: sequential test taken up after a restart (1 looks, 16 sessions")
               for line in said), said
    # v3 was judged against v1, and v2 passed in the same round: v3's evidence is about the former champion
    assert "gate v3: its sequential test does not go on, the champion changed while it was judged; it stays " \
           "deferred" in said, said


def test_the_same_test_goes_on_as_if_never_stopped(tmp_path):
    # Five rounds, once without a stop and once with the trainer restarted before every round: the same looks on the
    # same sessions, the same verdicts, and the saved capital equal to the last bit.
    runs = []
    for restart in (False, True):
        judge, state = SequentialJudge(noisy=frozenset({"2", "3", "5"})), tmp_path / f"restart-{restart}.json"
        worker, results = GateWorker(judge, lambda line: None, state), []
        try:
            for n, version in enumerate(("2", "3", "4", "5", "6")):
                (tmp_path / version).mkdir(exist_ok=True)
                if restart and n:
                    results += worker.finished()
                    worker.close()
                    worker = GateWorker(judge, lambda line: None, state)
                worker.submit(version, Candidate(f"step-{version}", _pool(2 * n, 2 * n + 16), tmp_path / version))
                assert worker.drain(timeout_s=30)
        finally:
            worker.close()
        results += worker.finished()
        runs.append((judge.looks, [(r.version, r.decision) for r in results],
                     state.read_text() if state.exists() else None))
    assert runs[0] == runs[1]
    assert any(len(looked) < 16 for _, looked in runs[0][0]), "no open test was looked at again: nothing compared"


@pytest.mark.parametrize("change, why", [
    ("decided", "the version is no longer deferred"),
    ("champion", "the champion changed"),
    ("re-registered", "the version was registered for another checkpoint"),
    ("settings", "it was run under other gate settings"),
    ("folder", "ConnectionError: the registry is down"),  # pruned, and the registry cannot give it back
    ("torn", "JSONDecodeError"),
])
def test_a_saved_test_that_is_no_longer_what_it_was_is_dropped_and_said(tmp_path, change, why):
    state, said, judge = tmp_path / "open-test.json", [], SequentialJudge(noisy=frozenset({"2"}))
    (tmp_path / "2").mkdir()
    assert _round(judge, "2", _pool(0, 16), state, tmp_path, said) == [("2", "defer")]
    if change == "decided":
        judge.decisions["2"] = "fail"
    elif change == "champion":
        judge.champion = "7"
    elif change == "re-registered":
        judge.tags = lambda version: {TAG_CHECKPOINT: f"another-run/{version}", names.TAG_GATE_DECISION: "defer"}
    elif change == "settings":
        judge.gate = GateConfig(max_reward_drop=0.4)
    elif change == "folder":
        (tmp_path / "2").rmdir()
    else:
        state.write_text(state.read_text()[:100])
    said.clear()
    worker = GateWorker(judge, said.append, state)
    worker.close()
    assert worker.in_use() == set() and not state.exists()
    assert len(said) == 1 and why in said[0] and "not taken up" in said[0], said
