"""The live canary in a running loop (trainer/gate/canary.py with serving's canary): a candidate the off-policy gate
defers goes on the `canary` alias, serving gives it half of the sessions, each whole, and the gate pairs the sessions
each version served and decides on them; a pass moves the champion.

The toy demo's loop on real parts, ended on a count of trained versions served (a canary serves too), the clock only
a ceiling. To make the canary the one that decides, the off-policy judgement always defers (the monitors' minimum of
held-out trajectories is out of reach) and the reward tests are on with a drop of 1.9 on rewards in [-1, 1], which an
equal candidate clears in a few pairs: whether a candidate deserves promotion is tests/trainer's question, this test
asks whether the canary's plumbing carries a decision from live sessions to the registry and back to serving.
"""

from __future__ import annotations

import json

import pytest

from liverl.contracts import names
from tests.e2e.loop_run import (TOY_CEILING_S, TOY_DEMO_CONFIG, ended_on_its_count, fit_brief_base_policy,
                                 loop_config, run_printing)

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

STOP_AFTER_VERSIONS = 2  # one canary at a time: the second trained version served comes after the first one ended
CANARY = "canary"


@pytest.fixture(scope="module")
def canary_run(request, tmp_path_factory):
    config = loop_config(request, tmp_path_factory, "canary-loop", TOY_DEMO_CONFIG, ceiling_s=TOY_CEILING_S,
                         stop_after_versions=STOP_AFTER_VERSIONS, seed=11)
    config.trainer.gate.max_reward_drop = 1.9  # both tests on (off at the range's width, 2)
    config.rewards.monitors.min_trajectories = 10**6  # every off-policy judgement defers
    config.trainer.gate.canary_alias = config.serving.canary_alias = CANARY
    config.serving.canary_fraction = 0.5
    fit_brief_base_policy(config)
    result, lines = run_printing(config)
    return result, lines


def _reports(result) -> dict[str, dict]:
    return {version: json.loads(lineage.tags.get(names.TAG_GATE_REPORT) or "{}")
            for version, lineage in result.lineage.items()}


def _decided_by_the_canary(result) -> dict[str, dict]:
    return {version: report for version, report in _reports(result).items()
            if "decided by the live canary" in str((report.get("figures") or {}).get("decided_by", ""))}


def test_the_run_ended_on_its_count(canary_run):
    result, lines = canary_run
    assert ended_on_its_count(lines), "the run ended on the clock, not the count"


def test_a_deferred_candidate_was_decided_by_the_sessions_it_served_live(canary_run):
    result, _ = canary_run
    decided = _decided_by_the_canary(result)
    reports = {v: (r.get("figures") or {}).get("decided_by") for v, r in _reports(result).items()}
    assert decided, f"no version decided by the live canary; each version's decided_by: {reports}"
    sessions = sorted(result.traffic.sessions, key=lambda s: s.started_at)
    for version, report in decided.items():
        figures, champion = report["figures"], report["champion"]
        assert figures["canary_pairs"] >= 1, figures
        assert figures["canary_candidate_sessions"] >= 1 and figures["canary_champion_sessions"] >= 1, figures
        own = [s.started_at for s in sessions if set(s.policy_versions) == {version}]  # every call of it
        theirs = [s.started_at for s in sessions if set(s.policy_versions) == {champion}]
        # while it was the canary, the champion served the other sessions: the two versions' sessions interleave
        assert len(own) >= 2 and any(own[0] < t < own[-1] for t in theirs), (
            f"v{version} (canary against v{champion}) served {len(own)} whole sessions, none of v{champion}'s "
            "between them")
        decision = result.lineage[version].tags.get(names.TAG_GATE_DECISION)
        assert decision in ("pass", "fail"), f"v{version}'s canary verdict is not its decision: {decision!r}"
        if decision == "pass":  # promoted: it replaced its champion, whose sessions end
            assert figures["decided_by"].startswith("promoted: ")
            assert any(t > theirs[-1] for t in own), f"v{version} passed but served nothing after v{champion}"
