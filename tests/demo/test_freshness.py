"""Freshness per session and its legs: end -> committed -> registered -> first served."""

from types import SimpleNamespace

import pytest

from demo.freshness import first_served_at, freshness


def session(session_id, started, ended, versions):
    return SimpleNamespace(session_id=session_id, started_at=started, ended_at=ended, policy_versions=versions)


def test_each_session_counts_from_its_end_to_the_first_served_version_trained_on_it():
    sessions = [session("a", 0, 10, ["1"]), session("b", 5, 20, ["1"]), session("c", 60, 70, ["2"]),
                session("d", 90, 95, ["3"])]
    served_at = first_served_at(sessions)
    assert served_at == {"1": 0, "2": 60, "3": 90}
    trained = {"1": set(), "2": {"a"}, "3": {"a", "b", "c"}}  # v3 inherits v2's sessions
    committed = {"a": 25, "b": 40, "c": 80}
    registered = {"2": 50, "3": 85}
    fresh = freshness(sessions, trained, served_at, committed, registered)
    assert fresh.seconds == {"a": 50, "b": 70, "c": 20}  # a: first served on v2 at 60, not v3 at 90
    assert fresh.not_yet == 1
    assert fresh.median() == 50
    assert fresh.describe() == "median 50 s, p95 70 s (3 sessions reached a served version, 1 not yet)"
    assert fresh.legs["distilled"] == {"a": 15, "b": 20, "c": 10}
    assert fresh.legs["trained"] == {"a": 25, "b": 45, "c": 5}
    assert fresh.legs["served"] == {"a": 10, "b": 5, "c": 5}
    assert fresh.leg_medians() == {"distilled": 15, "trained": 25, "served": 5}
    assert fresh.describe_legs() == "end -> table 15 s, -> registered 25 s, -> served 5 s"


def test_without_commit_or_registration_times_there_are_no_legs():
    sessions = [session("a", 0, 10, ["1"]), session("b", 30, 40, ["2"])]
    fresh = freshness(sessions, {"2": {"a"}}, first_served_at(sessions))
    assert fresh.seconds == {"a": 20}
    assert fresh.leg_medians() == {} and fresh.describe_legs() == ""
    assert fresh.p95() == 20


def test_no_session_reached_a_version():
    fresh = freshness([session("a", 0, 10, ["1"])], {"1": set()}, {"1": 0})
    assert fresh.not_yet == 1
    assert fresh.median() != fresh.median()  # nan
    assert fresh.p95() != fresh.p95()
    assert fresh.describe() == "no session reached a served version trained on it (1 sessions not yet)"


@pytest.mark.parametrize("clock_skew", [-5.0, 0.0])
def test_a_leg_never_goes_negative(clock_skew):
    sessions = [session("a", 0, 10, ["1"]), session("b", 30, 40, ["2"])]
    fresh = freshness(sessions, {"2": {"a"}}, first_served_at(sessions), {"a": 10 + clock_skew}, {"2": 35})
    assert min(fresh.legs["distilled"].values()) >= 0.0
