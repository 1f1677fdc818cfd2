"""The summary's line on what the gate did with the run's candidates, read from each version's gate tags.

A run whose champion never moved has two very different stories: the gate refused what training made (it got
worse), or the gate never had evidence enough to decide (too few held-out sessions, e.g. on a busy machine). The
served-reward line cannot tell them apart (it sees one version either way); this line does, and names the most
held-out sessions any judgement had.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from demo.lineage import VersionLineage
from liverl.contracts import names

# trainer/io/publish.py refuse() marks a version refused unjudged with "judged": false in its report; reports
# written before that mark say so only in their reasons' words
UNJUDGED_PREFIXES = ("superseded by", "not judged")
ORDER = ("promoted", "deferred", "refused unjudged", "refused", "undecided")


def gate_outcomes(lineage: Mapping[str, VersionLineage]) -> tuple[Counter, int]:
    """(how many candidates ended each way, the most held-out sessions one judgement had); the base is no candidate."""
    outcomes: Counter = Counter()
    most = 0
    for version in lineage.values():
        if not version.parent:
            continue
        decision = version.tags.get(names.TAG_GATE_DECISION, "")
        try:
            report = json.loads(version.tags.get(names.TAG_GATE_REPORT) or "{}")
        except ValueError:
            report = {}
        reasons = [str(r) for r in report.get("reasons", ())]
        if decision == "pass":
            outcomes["promoted"] += 1
        elif decision == "defer":
            outcomes["deferred"] += 1
        elif decision == "fail" and _unjudged(report, reasons):
            outcomes["refused unjudged"] += 1
        elif decision == "fail":
            outcomes["refused"] += 1
        else:
            outcomes["undecided"] += 1  # still being judged when the run ended
        figures = report.get("figures") or {}
        for key in ("holdout_trajectories", "reward_sequential_sessions"):
            if isinstance(figures.get(key), (int, float)):
                most = max(most, int(figures[key]))
    return outcomes, most


def promoted_line(lineage: Mapping[str, VersionLineage]) -> list[str]:
    """The shared policy's promoted versions, oldest first: each replaced the one before it as champion (the first
    replaced the base). Tenants' adapters are lines of their own and are left out."""
    return sorted((v for v, version in lineage.items()
                   if v.isdigit() and version.parent and not version.tags.get(names.TAG_TENANT)
                   and version.tags.get(names.TAG_GATE_DECISION) == "pass"), key=int)


def _unjudged(report: dict, reasons: list[str]) -> bool:
    if "judged" in report:
        return report["judged"] is False
    return bool(reasons) and all(r.startswith(UNJUDGED_PREFIXES) for r in reasons)


def describe_gate(lineage: Mapping[str, VersionLineage]) -> str:
    outcomes, most = gate_outcomes(lineage)
    total = sum(outcomes.values())
    if not total:
        return "gate: no candidate was registered in this run"
    counts = ", ".join(f"{outcomes[kind]} {kind}" for kind in ORDER if outcomes[kind])
    line = f"gate: {total} candidates: {counts}; the most held-out sessions one judgement had: {most}"
    if not outcomes["promoted"] and outcomes["deferred"]:
        line += (" -- too little evidence to promote any candidate in this run (deferred: neither shown better nor "
                 "worse); a longer run gathers more")
    return line
