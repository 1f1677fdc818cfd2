"""The whole loop on real parts: broker, MLflow, capture, vLLM serving, Beam, DeepSpeed, hot-swap.

One run of the demo (fixed seed) backs every assertion here. It ends on a count, not a clock: once the
product was served STOP_AFTER_VERSIONS trained versions (demo.run.stop_after_versions), with TOY_CEILING_S only
as the ceiling, so a slow machine takes longer instead of failing. What is asserted is causality: each
version served after a swap was trained, by its lineage (table versions, Kafka offsets), only on sessions
and model calls that an earlier version served before it. Whether a candidate deserves promotion is the
gate's question (tests/trainer/); here the gate passes any finite candidate, so the count depends on the
loop's plumbing, not on how much a few minutes of training on a busy machine could learn; for the same
reason the base policy is fitted briefly (BASE_FIT_STEPS).
"""

from __future__ import annotations


import pytest

from liverl.io.lineage import merge_offsets
from liverl.io.table_history import TableHistory
from tests.e2e.loop_run import (TOY_CEILING_S, TOY_DEMO_CONFIG, ended_on_its_count, fit_brief_base_policy,
                                 loop_config, run_printing)

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

STOP_AFTER_VERSIONS = 2
BASE_VERSION = "1"


@pytest.fixture(scope="module")
def demo_result(request, tmp_path_factory):
    config = loop_config(request, tmp_path_factory, "loop", TOY_DEMO_CONFIG, ceiling_s=TOY_CEILING_S,
                         stop_after_versions=STOP_AFTER_VERSIONS, seed=7)
    fit_brief_base_policy(config)
    result, lines = run_printing(config)
    return result, lines, config


def swapped_versions(result) -> list[str]:
    return [v for v in result.traffic.by_version() if v != BASE_VERSION]


def first_served(result, version: str) -> float:
    return min(s.started_at for s in result.traffic.sessions if version in s.policy_versions)


def test_the_run_ended_on_its_count_of_served_trained_versions(demo_result):
    result, lines, _ = demo_result
    sessions = sorted(result.traffic.sessions, key=lambda s: s.started_at)
    assert sessions and sessions[0].served_version == BASE_VERSION, "traffic starts on the base policy"
    assert len(swapped_versions(result)) >= STOP_AFTER_VERSIONS, (
        f"serving swapped to {swapped_versions(result)} within the {TOY_CEILING_S:.0f} s ceiling; "
        f"see the logs under the test's stack data_dir")
    assert ended_on_its_count(lines), "the run ended on the clock, not the count"


def test_each_swapped_version_was_trained_only_on_sessions_that_ended_before_it_served(demo_result):
    result, _, _ = demo_result
    sessions = result.traffic.sessions
    for version in swapped_versions(result):
        lineage = result.lineage[version]
        assert lineage.table_versions and lineage.kafka_offsets, f"v{version} has no lineage tags"
        captured_before = {s.session_id for s in sessions if s.ended_at < first_served(result, version)}
        trained = lineage.all_sessions
        assert trained, f"v{version} names no sessions through its table versions"
        assert trained <= {s.session_id for s in sessions}, "trained on sessions the product never ran"
        assert trained <= captured_before, "a version cannot be trained on sessions that ended after it served"


def test_each_swapped_version_names_the_kafka_records_of_calls_earlier_versions_served(demo_result):
    result, _, config = demo_result
    table = TableHistory(config.table.trajectories_uri)
    commits = {commit.version: commit for commit in table.commits_after(-1)}
    for version in swapped_versions(result):
        lineage = result.lineage[version]
        own = [commits[v] for v in lineage.table_versions]
        assert lineage.kafka_offsets == merge_offsets(c.kafka_offsets for c in own), (
            f"v{version}'s Kafka offsets are not those its table versions committed")
        served_before = {v for s in result.traffic.sessions if s.started_at < first_served(result, version)
                         for v in s.policy_versions}
        for commit in own:
            for row in table.batch_rows(commit.batch_id, columns=["session_id", "policy_versions"]):
                behaviour = set(row["policy_versions"])
                assert behaviour and behaviour <= served_before - {version}, (
                    f"v{version} trained on session {row['session_id']} served by {sorted(behaviour)}; "
                    f"only {sorted(served_before)} had served before it")


def test_the_run_reports_freshness_and_writes_its_report(demo_result):
    result, lines, _ = demo_result
    assert result.freshness.seconds, "no session reached a served version"
    assert any("freshness: median" in line for line in lines)
    for name in ["index.html", "reward_by_version.png", "freshness.png", "staleness.png", "throughput.png",
                 "monitors.png"]:
        assert (result.report_dir / name).stat().st_size > 0
