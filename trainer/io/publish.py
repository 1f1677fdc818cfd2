"""Publish a checkpoint: register its exported policy as the candidate, then let the gate decide about champion.

    CheckpointPublisher(registry, gate config, ...).publish(CheckpointToPublish) -> PublishResult

Idempotent, because a crash may land anywhere in here: the version is found again by its checkpoint key,
and a version that already carries a gate decision is not judged twice. The gate's verdict (decision and
report) is recorded on the candidate's version either way; only a pass moves `champion`, and a "defer" (too little
held-out evidence to keep the gate's error rates) neither moves it nor counts as a refusal.

A pass is one recoverable step, compare-and-set under the registry's promotion lease (liverl/io/lease.py): with
the lease held, the champion is read again; if it is still the one the candidate was judged against, the report
(decision "pass", the champion judged against) is written first, then `champion` moves, then the decision tag
marks the step done. A crash leaves a report without a decision, which `settle` finishes from the registry alone:
the version serves (the alias moved): decision pass; the champion is still the one judged against: promote now;
another is champion: refused. So the serving champion is never tagged "fail". A candidate whose champion moved
while it was judged (another trainer promoted) is judged again against the new one (gate.rejudges times), then
refused; only trainers that take the lease are ordered by it (base_policy sets the first champion without it).

A tenant's publisher (tenant="acme": trainer.tenants) does the same with the tenant's own aliases,
`candidate-acme` and `champion-acme`, and a promotion lease of its own, so it never moves another tenant's alias or
the shared `champion`. Its versions carry TAG_TENANT. A tenant without a champion yet is judged against the shared
champion, the policy serving falls back to for it; its promotion is then compare-and-set on `champion-acme` still
being unset.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from liverl.contracts import names
from liverl.io.lease import RegistryLease
from trainer.gate.holdout import GateEvidence
from trainer.gate.online_eval_process import online_evaluator
from trainer.gate.promotion import GateReport, evaluate
from trainer.io.lineage import lineage_tags
from trainer.io.registry import TAG_CHECKPOINT, Registry
from trainer.io.signing import TAG_FILES_DIGEST, sign_canary, sign_pass
from trainer.io.state import PendingPublish

PROMOTION_LEASE = "promotion"  # the registry lease every trainer holds while it moves `champion`
LEASE_POLL_S = 0.5  # how often a promotion waiting for the lease tries again


@dataclass(frozen=True)
class CheckpointToPublish:
    """Produced by the loop right after a DeepSpeed checkpoint and its export; consumed by
    CheckpointPublisher.publish."""

    pending: PendingPublish  # lineage of the window (also in the state file, so a restart can finish it)
    run_key: str  # with pending.checkpoint_tag: the version's idempotency key
    parent_version: str  # the version the window's training started from
    step: int  # trainer step of the checkpoint
    folder: Path  # the exported HF policy folder of the checkpoint's weights
    evidence: GateEvidence  # the gate's inputs, from the table snapshot the checkpoint was trained up to
    step_metrics: Sequence[tuple[int, dict[str, float]]] = ()  # (step, figures) logged on the version's run


@dataclass(frozen=True)
class PublishResult:
    version: str  # the registered candidate
    decision: str  # the gate's decision recorded on it: "pass" | "fail" | "defer" (too little evidence: neither)
    reasons: tuple[str, ...]  # why it failed or deferred (empty on pass)
    champion: str | None  # the champion after publishing
    judged: bool = True  # False: refused unjudged (superseded, or left by a stop): it says nothing of its quality

    @property
    def promoted(self) -> bool:
        return self.decision == "pass" and self.champion == self.version

    @property
    def deferred(self) -> bool:
        """Judged on too little evidence to decide: not promoted, not refused (a later candidate supersedes it)."""
        return self.decision == "defer"


class CheckpointPublisher:
    def __init__(self, registry: Registry, gate: GateConfig, loss: LossConfig, monitors: MonitorsConfig,
                 max_seq_len: int, reward_config_version: str, download_dir: Path,
                 say: Callable[[str], None] = print, signing_key_file: Path | None = None,
                 tenant: str | None = None):
        self.registry = registry
        self.tenant = tenant  # None: the shared policy; else the tenant whose adapter this publisher gates
        self.candidate_alias = names.ALIAS_CANDIDATE if tenant is None else names.tenant_candidate_alias(tenant)
        self.champion_alias = names.ALIAS_CHAMPION if tenant is None else names.tenant_champion_alias(tenant)
        self.lease_name = PROMOTION_LEASE if tenant is None else f"{PROMOTION_LEASE}-{tenant}"
        # The live canary's alias, the one serving follows for this group (trainer/gate/canary.py); None: off.
        self.canary_alias = names.canary_alias(gate.canary_alias, tenant) if gate.canary_alias else None
        self.gate, self.loss, self.monitors, self.max_seq_len = gate, loss, monitors, max_seq_len
        self.reward_config_version = reward_config_version
        self.download_dir = download_dir  # the champion's folder is downloaded here to be judged against
        self.say = say
        self.online = online_evaluator(gate)  # the product's evaluator, if any (trainer/gate/online_eval_process.py)
        self.owner = f"trainer-{uuid.uuid4().hex[:12]}"  # this publisher's name on the promotion lease
        self.signing_key_file = signing_key_file  # signs each version it promotes (None: unsigned, tests only)

    def close(self) -> None:
        """Ends a persistent online evaluator; call when the trainer stops."""
        if self.online is not None:
            self.online.close()

    def publish(self, checkpoint: CheckpointToPublish) -> PublishResult:
        """Register, then judge, in the caller's thread (trainer/gate/worker.py judges beside training instead)."""
        return self.decide(self.register(checkpoint), checkpoint)

    def decide(self, version: str, checkpoint: CheckpointToPublish) -> PublishResult:
        """The gate's verdict on a registered candidate: recorded (or half-recorded) before a crash, or judged now."""
        settled = self.settle(version)
        return settled if settled is not None else self.judge(version, checkpoint)

    def settle(self, version: str) -> PublishResult | None:
        """The verdict already recorded on the version, finished where a crash cut it short (see the module
        docstring); None when it was never judged."""
        tags = self.registry.tags(version)
        report = _read_report(tags)
        champion = self.registry.alias_version(self.champion_alias)
        if names.TAG_GATE_DECISION in tags:  # judged before a crash: never twice
            return PublishResult(version, tags[names.TAG_GATE_DECISION], tuple(report.get("reasons", ())), champion)
        if champion == version:  # the alias moved, the decision was not written yet: the promotion happened
            self.registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
            self.say(f"gate v{version}: promotion finished after a restart -> champion")
            return PublishResult(version, "pass", (), version)
        if not report:
            return None
        if report.get("decision") != "pass":
            decision = "defer" if report.get("decision") == "defer" else "fail"
            self.registry.set_tag(version, names.TAG_GATE_DECISION, decision)
            return PublishResult(version, decision, tuple(report.get("reasons", ())), champion)
        judged_against = report.get("champion")
        refusal = self._promote(version, report)
        if refusal is None:
            self.say(f"gate v{version} vs v{judged_against}: pass (finished after a restart) -> champion")
            return PublishResult(version, "pass", (), version)
        return self.refuse(version, refusal.reason)

    def register(self, checkpoint: CheckpointToPublish) -> str:
        """The candidate version of this checkpoint, registered once, with its lineage; `candidate` points at it."""
        started = time.perf_counter()
        pending = checkpoint.pending
        key = f"{checkpoint.run_key}/{pending.checkpoint_tag}"
        version = self.registry.find_by_tag(TAG_CHECKPOINT, key)
        if version is None:
            tags = lineage_tags(pending, checkpoint.parent_version, checkpoint.step, self.reward_config_version,
                                checkpoint.run_key, checkpoint.folder)
            if self.tenant is not None:
                tags[names.TAG_TENANT] = self.tenant
            version = self.registry.register(checkpoint.folder, tags, run_name=f"train {pending.checkpoint_tag}",
                                             step_metrics=list(checkpoint.step_metrics))
        self.registry.set_alias(self.candidate_alias, version)
        self.say(
            f"version {version}{self._for()} registered | parent v{checkpoint.parent_version} | step {checkpoint.step} "
            f"| table versions {pending.table_versions} | trajectories {pending.trajectories} "
            f"| {time.perf_counter() - started:.1f}s"
        )
        return version

    def judge(self, version: str, checkpoint: CheckpointToPublish) -> PublishResult:
        started = time.perf_counter()
        for _ in range(self.gate.rejudges + 1):
            holder = self.registry.alias_version(self.champion_alias)
            champion = self.champion_for(holder)
            report = self.report(version, champion, checkpoint)
            body = {"decision": report.decision, "champion": champion, "reasons": report.reasons,
                    "figures": report.figures}
            if self.tenant is not None:  # what the tenant's alias held: what promotion compares and sets
                body["alias_champion"] = holder
            if not report.passed:  # report, then decision: the decision tag marks the gate as done for a restart
                self.registry.set_tag(version, names.TAG_GATE_REPORT, _report_tag(body))
                self.registry.set_tag(version, names.TAG_GATE_DECISION, report.decision)  # "fail" or "defer"
            else:
                refusal = self._promote(version, body)
                if refusal is not None and refusal.moved:
                    self.say(f"gate v{version} vs v{champion}: pass, but {refusal.reason}; judging again")
                    continue
                if refusal is not None:
                    return self.refuse(version, refusal.reason)
            self._say_verdict(version, champion, report, started)
            return PublishResult(version, report.decision, tuple(report.reasons),
                                 version if report.passed else holder)
        return self.refuse(version, f"{refusal.reason}; still so after {self.gate.rejudges + 1} judgements "
                                    "(trainer.gate.rejudges)")

    def champion_for(self, holder: str | None) -> str | None:
        """The champion a candidate is judged against: its alias's, or for a tenant without one yet the shared
        champion (what serving gives the tenant until its own adapter is promoted)."""
        if holder is not None or self.tenant is None:
            return holder
        return self.registry.alias_version(names.ALIAS_CHAMPION)

    def _for(self) -> str:
        return "" if self.tenant is None else f" (tenant {self.tenant})"

    def _promote(self, version: str, body: dict) -> "_Refusal | None":
        """Compare-and-set under the promotion lease: the champion alias moves to version only if it still is what
        it was when the version was judged (body["champion"]; a tenant's: body["alias_champion"]); None when it
        moved, else why not."""
        lease = RegistryLease(self.registry, self.lease_name, self.owner, slots=1,
                              ttl_s=self.gate.promotion_lease_ttl_s)
        if not self._acquire(lease):
            return _Refusal(f"another trainer kept the registry's promotion lease (holders {lease.holders()}) past "
                            f"trainer.gate.promotion_lease_wait_s={self.gate.promotion_lease_wait_s:g} s; "
                            "not promoted, the next candidate tries again")
        try:
            judged_against = body["alias_champion"] if "alias_champion" in body else body.get("champion")
            if names.TAG_ERASURE_EXCLUDED in self.registry.tags(version):
                return _Refusal(f"version {version} was trained on the data of a subject `liverl forget` erased "
                                f"(erasure {self.registry.tags(version)[names.TAG_ERASURE_EXCLUDED]}) and is "
                                "excluded from promotion; train a new version on the table as it is now")
            now = self.registry.alias_version(self.champion_alias)
            if now != judged_against:
                return _Refusal(f"judged against v{judged_against}, but {self.champion_alias} is now v{now} (another "
                                f"trainer promoted it): v{judged_against} is no longer champion, so this comparison "
                                "cannot promote", moved=True)
            # The report first: from here a crash is finished by settle(), never refused as unjudged.
            self.registry.set_tag(version, names.TAG_GATE_REPORT, _report_tag({**body, "decision": "pass"}))
            self._sign(version)  # before the alias: serving never sees this champion unsigned
            self.registry.set_alias(self.champion_alias, version)
            self.registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
            return None
        finally:
            lease.release()

    def _sign(self, version: str) -> None:
        digest = self.registry.tags(version).get(TAG_FILES_DIGEST)
        if self.signing_key_file is None or digest is None:  # registered before digests were recorded: unsigned
            return
        sign_pass(self.registry, version, digest, self.signing_key_file)

    def _acquire(self, lease: RegistryLease) -> bool:
        deadline = time.monotonic() + self.gate.promotion_lease_wait_s
        while not lease.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(LEASE_POLL_S)
        return True

    def _say_verdict(self, version: str, champion: str | None, report: GateReport, started: float) -> None:
        figures = " | ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                             for key, value in report.figures.items() if not key.startswith("monitor."))
        why = f" ({'; '.join(report.reasons)})" if report.reasons else ""
        outcome = ("champion" if report.passed else f"deferred, judged again on a later candidate; champion stays "
                   f"v{champion}" if report.deferred else f"champion stays v{champion}")
        self.say(f"gate v{version}{self._for()} vs v{champion}: {report.decision}{why} -> {outcome} | {figures} "
                 f"| {time.perf_counter() - started:.1f}s")

    def start_canary(self, version: str) -> None:
        """Point the group's canary alias at version, signed for the canary first: serving sends it
        serving.canary_fraction of the sessions."""
        digest = self.registry.tags(version).get(TAG_FILES_DIGEST)
        if self.signing_key_file is not None and digest is not None:
            sign_canary(self.registry, version, digest, self.signing_key_file)
        self.registry.set_alias(self.canary_alias, version)

    def end_canary(self) -> None:
        """Remove the group's canary alias, if set: serving stops its canary."""
        self.registry.delete_alias(self.canary_alias)

    def canary_verdict(self, version: str, passed: bool, reasons: list[str], figures: dict, champion: str,
                       alias_champion: str | None) -> PublishResult:
        """Record the live canary's decision on the version, its figures added to the report of its deferral; a pass
        is promoted as the gate's is (compare-and-set on the champion alias still naming `alias_champion`: None for
        a tenant without a champion of its own, compared with the shared `champion`)."""
        earlier = _read_report(self.registry.tags(version)).get("figures") or {}
        body = {"decision": "pass" if passed else "fail", "champion": champion, "reasons": reasons,
                "figures": {**earlier, **figures}}
        if self.tenant is not None:
            body["alias_champion"] = alias_champion
        if passed:
            refusal = self._promote(version, body)
            if refusal is not None:
                return self.refuse(version, refusal.reason)
        else:
            self.registry.set_tag(version, names.TAG_GATE_REPORT, _report_tag(body))
            self.registry.set_tag(version, names.TAG_GATE_DECISION, "fail")
        outcome = "champion" if passed else f"champion stays v{champion}"
        self.say(f"gate v{version}{self._for()} vs v{champion}: {body['decision']} ({figures['decided_by']}) "
                 f"-> {outcome}")
        return PublishResult(version, body["decision"], tuple(reasons), version if passed else champion)

    def refuse(self, version: str, reason: str) -> PublishResult:
        """Record a refusal without judging (a candidate superseded before its turn, or one whose judging a stopped
        trainer left unfinished), so that every version carries a decision; the champion stays."""
        champion = self.registry.alias_version(self.champion_alias)
        if champion == version:  # it serves (promoted before a crash, or by hand): never tagged "fail"
            self.registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
            self.say(f"gate v{version}: not refused ({reason}): it is the champion")
            return PublishResult(version, "pass", (), version)
        body = {"decision": "fail", "judged": False, "champion": champion, "reasons": [reason], "figures": {}}
        self.registry.set_tag(version, names.TAG_GATE_REPORT, _report_tag(body))
        self.registry.set_tag(version, names.TAG_GATE_DECISION, "fail")
        # A tenant without a champion of its own is served the shared one: name that (never "vNone").
        self.say(f"gate v{version}{self._for()}: not judged ({reason}) -> champion stays "
                 f"v{self.champion_for(champion)}")
        return PublishResult(version, "fail", (reason,), champion, judged=False)

    def refuse_unjudged(self, run_key: str, keep: str | None = None) -> list[str]:
        """Versions of this trainer run (run_key) left without a decision by a stop, except the checkpoint key `keep`
        (a pending publish the restart finishes): a verdict cut short is finished (settle), an unjudged version is
        refused; returns the versions refused."""
        refused = []
        for mv in self.registry.versions():
            key = mv.tags.get(TAG_CHECKPOINT, "")
            if key.startswith(f"{run_key}/") and key != keep and names.TAG_GATE_DECISION not in mv.tags:
                result = self.settle(mv.version)
                if result is None:
                    result = self.refuse(mv.version, "not judged: the trainer stopped while it waited for or ran "
                                                     "its gate")
                if result.decision == "fail":
                    refused.append(mv.version)
        return refused

    def report(self, version: str, champion: str | None, checkpoint: CheckpointToPublish) -> GateReport:
        from trainer.io.policy_io import download_policy, load_policy

        if not self.gate.enabled:
            return GateReport("fail", ["gate disabled (trainer.gate.enabled=false): champion stays"], {})
        if champion is None or champion == version:
            return GateReport("fail", [f"no champion to compare with (champion: {champion})"], {})
        started = time.perf_counter()
        champion_folder = download_policy(self.registry, champion, self.download_dir)  # an adapter: its base too
        offline = evaluate(
            candidate=load_policy(checkpoint.folder),  # loading the export also checks that serving can
            champion=load_policy(champion_folder),
            evidence=checkpoint.evidence, config=self.gate, loss_config=self.loss, monitors=self.monitors,
            max_seq_len=self.max_seq_len,
        )
        offline_s = time.perf_counter() - started
        reasons, figures = self.online_verdict(checkpoint.folder, champion_folder)
        general_reasons, general_figures = self.general_text_verdict(checkpoint.folder, champion_folder)
        failures = [*([] if offline.deferred else offline.reasons), *general_reasons, *reasons]
        figures = {**offline.figures, **general_figures, **figures,
                   "offline_s": offline_s, "online_s": time.perf_counter() - started - offline_s}
        if failures:  # a failed check decides over too little evidence for another
            figures["decided_by"] = f"refused by: {failures[0]}"
            return GateReport("fail", failures, figures)
        return GateReport(offline.decision, offline.reasons, figures)

    def general_text_verdict(self, candidate: Path, champion: Path) -> tuple[list[str], dict]:
        """The general-text NLL check (gate.general_text_file), if configured; an unreadable text fails closed."""
        from trainer.gate.general_text import judge_general_text

        if self.gate.general_text_file is None:
            return [], {}
        try:
            return judge_general_text(candidate, champion, self.gate.general_text_file,
                                      self.gate.max_general_nll_increase, self.download_dir)
        except (OSError, ValueError) as error:
            return [f"general-text check failed: {error}"], {}

    def online_verdict(self, candidate: Path, champion: Path) -> tuple[list[str], dict]:
        """The candidate run on held-out tasks by the configured evaluator (gate.online_eval_command), if any;
        fail-closed: an evaluator that fails refuses the candidate."""
        from trainer.gate.online_eval import OnlineEvalError, judge_online

        if self.online is None:
            return [], {}
        try:
            online = self.online.evaluate(candidate, champion)
        except OnlineEvalError as error:
            return [f"online evaluation failed: {error}"], {"online": "failed"}
        return judge_online(online, self.gate), online.figures()


@dataclass(frozen=True)
class _Refusal:
    """Why a passed candidate was not promoted; moved: the champion changed while it was judged."""

    reason: str
    moved: bool = False


REPORT_TAG_CHARS = 5000  # what one registry tag value holds


def _report_tag(body: dict) -> str:
    """The report as a tag value that stays valid JSON: the figures are dropped first when it is too long."""
    text = json.dumps(body, sort_keys=True)
    if len(text) > REPORT_TAG_CHARS:
        text = json.dumps({**body, "figures": {}, "figures_dropped": "too long for a tag",
                           "reasons": [reason[:300] for reason in body.get("reasons", ())][:8]}, sort_keys=True)
    return text


def _read_report(tags: dict[str, str]) -> dict:
    """The recorded report ({} when none, or one cut short by an older writer's truncation)."""
    try:
        report = json.loads(tags.get(names.TAG_GATE_REPORT) or "{}")
    except json.JSONDecodeError:
        return {}
    return report if isinstance(report, dict) else {}
