"""demo/gate_summary.py: the summary tells a run whose gate had too little evidence from one whose gate refused."""

from __future__ import annotations

import json

from demo.gate_summary import describe_gate, gate_outcomes, promoted_line
from demo.lineage import VersionLineage
from liverl.contracts import names


def _version(number: int, decision: str | None, reasons=(), figures=None, **marks) -> VersionLineage:
    tags = {} if decision is None else {
        names.TAG_GATE_DECISION: decision,
        names.TAG_GATE_REPORT: json.dumps({"decision": decision, "reasons": list(reasons), "figures": figures or {},
                                           **marks})}
    return VersionLineage(str(number), "" if number == 1 else "1", 0, [], {}, tags)


def _lineage(*versions: VersionLineage) -> dict[str, VersionLineage]:
    return {v.version: v for v in (_version(1, "pass", ["base policy"]), *versions)}


def test_a_run_that_deferred_everything_says_the_evidence_was_too_little():
    lineage = _lineage(
        _version(2, "defer", ["insufficient evidence: ..."], {"holdout_trajectories": 11,
                                                                "reward_sequential_sessions": 17}),
        _version(3, "fail", ["superseded by v4 before its turn"]),
        _version(4, "defer", ["insufficient evidence: ..."], {"holdout_trajectories": 16}),
        _version(5, None))  # still being judged when the run ended
    outcomes, most = gate_outcomes(lineage)
    assert outcomes == {"deferred": 2, "refused unjudged": 1, "undecided": 1} and most == 17
    line = describe_gate(lineage)
    assert line.startswith("gate: 4 candidates: 2 deferred, 1 refused unjudged, 1 undecided;")
    assert "most held-out sessions one judgement had: 17" in line and "too little evidence to promote" in line


def test_a_run_whose_gate_refused_or_promoted_does_not_blame_the_evidence():
    refused = _lineage(_version(2, "fail", ["reward change -0.6 below -0.5"], {"holdout_trajectories": 40}),
                       _version(3, "fail", ["superseded by v4 before its turn", "kl 3.1 above 2"]))
    assert gate_outcomes(refused)[0] == {"refused": 2}  # a judged reason among them: a real refusal
    assert "too little evidence" not in describe_gate(refused)
    promoted = _lineage(_version(2, "pass"), _version(3, "defer", ["insufficient evidence"]))
    assert "too little evidence" not in describe_gate(promoted) and "1 promoted, 1 deferred" in describe_gate(promoted)
    assert describe_gate(_lineage()) == "gate: no candidate was registered in this run"
    broken = _lineage(_version(2, "defer"))
    broken["2"].tags[names.TAG_GATE_REPORT] = "{not json"
    assert gate_outcomes(broken) == ({"deferred": 1}, 0)


def test_the_reports_judged_mark_decides_over_the_reasons_words():
    marked = _lineage(_version(2, "fail", ["the trainer was asked to stop"], judged=False),
                      _version(3, "fail", ["superseded by v4 before its turn"], judged=True))
    assert gate_outcomes(marked)[0] == {"refused unjudged": 1, "refused": 1}


def test_the_promoted_line_is_the_shared_policys_passed_versions_oldest_first():
    tenant = _version(4, "pass")
    tenant.tags[names.TAG_TENANT] = "acme"  # a tenant's adapter is a line of its own
    lineage = _lineage(_version(12, "pass"), _version(3, "pass"), tenant, _version(5, "defer"), _version(7, "fail"),
                       _version(9, None))
    assert promoted_line(lineage) == ["3", "12"]  # by number, not by text ("12" < "3"); the base is no promotion
    assert promoted_line(_lineage()) == []
