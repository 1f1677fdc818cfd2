"""`liverl forget`: erase a data subject from every store, record the erasure, name the versions it trained.

    liverl forget --tenant acme --user dave@example.com        # one user: all their sessions
    liverl forget --tenant acme --session conv-17              # one session
    liverl forget --tenant acme --all                          # the whole tenant
    liverl forget --tenant acme --user dave --dry-run          # only say what would be erased
    liverl forget --tenant acme --user new-42 --allow-unknown  # not arrived yet: record the opt-out
    liverl forget --tenant acme --user dave --exclude-versions # and keep the versions trained on them unpromoted

An erasure cannot be undone, so it is refused (exit code 2, nothing changed) unless it names exactly one known
subject: an empty or blank id, an id that looks like a pattern (unless --literal), a tenant or subject nothing is
known of (unless --allow-unknown), or a tenant without --all. What it will erase is printed first; --dry-run
stops there.

In this order: the subject's keys are destroyed and tombstoned first (from then on every copy of their
records in Kafka, spools and backups is unreadable, and capture, serving, import and replay drop anything new
of theirs); then their rows leave the trajectory and dead-letter tables (files rewritten, history vacuumed),
the distiller's staged files of every kind are rewritten without them, their MLflow traces are deleted and the
audit runs' sample artifacts rewritten without their rows (the embedded tracking database rebuilt), the capture
service's session state is purged. The audit log (privacy.audit_log) records the erasure when it starts and, when
it is done, one JSON line of what each store erased, with the registered versions trained on the subject's data;
the same summary is printed.
"""

from __future__ import annotations

import getpass
import json
import secrets
import sys
import time

REFUSED_EXIT_CODE = 2  # argparse's: the request was wrong, nothing was done


def add_arguments(parser) -> None:
    parser.add_argument("--tenant", required=True, help="the tenant whose subject is erased")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="the user id as the product sends it: every session of theirs")
    who.add_argument("--session", help="one session id as the product knows it")
    who.add_argument("--all", dest="whole_tenant", action="store_true", help="every subject of the tenant")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="a subject nothing is known of yet: record the opt-out (its data is dropped if it "
                             "arrives), instead of refusing")
    parser.add_argument("--literal", action="store_true",
                        help="the id holds one of *?%%[] as the product sent it (such ids are refused otherwise)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be erased, change nothing")
    parser.add_argument("--exclude-versions", action="store_true",
                        help="tag the registered versions trained on the subject's data so the gate never promotes them")
    parser.add_argument("--operator", default=None, help="who asked for the erasure (default: the OS user)")


def run(config, args) -> int:
    from liverl.privacy.subject import SubjectRefused

    try:
        summary = forget(config, args.tenant, args.user, args.session, args.exclude_versions,
                         args.operator or getpass.getuser(), whole_tenant=args.whole_tenant,
                         allow_unknown=args.allow_unknown, dry_run=args.dry_run, literal=args.literal,
                         say=lambda line: print(line, flush=True))
    except SubjectRefused as refused:
        print(f"liverl forget: refused, nothing was erased: {refused}", file=sys.stderr, flush=True)
        return REFUSED_EXIT_CODE
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


def forget(config, tenant: str, user: str | None = None, session: str | None = None, exclude_versions: bool = False,
           operator: str = "", *, whole_tenant: bool = False, allow_unknown: bool = False, dry_run: bool = False,
           literal: bool = False, say=lambda line: None) -> dict:
    """Erase the subject everywhere (see the module doc); returns the audit entry, also appended to the log (with
    dry_run: the plan, and nothing is changed or logged). SubjectRefused when the request names no one subject."""
    from liverl.privacy import key_store, tenant_redactor
    from liverl.privacy.erasure_plan import plan_erasure
    from liverl.privacy.subject import check_request, resolve

    check_request(tenant, user, session, whole_tenant, literal)  # before anything is read: a refusal changes nothing
    store = key_store(config)
    redact_id = tenant_redactor(config, tenant).redact_id  # a session id holding personal data is stored so
    plan = plan_erasure(config, store, tenant, allow_unknown,
                        lambda: resolve(store, tenant, user, session, redact_id, whole_tenant, literal))
    say(f"liverl forget: {plan.describe()}{' (dry run: nothing changed)' if dry_run else ''}")
    if dry_run:
        return {"dry_run": True, **plan.summary()}
    return _erase(config, store, plan, exclude_versions, operator)


def _erase(config, store, plan, exclude_versions: bool, operator: str) -> dict:
    from ingest.service import spool_dir
    from ingest.sessions import purge_sessions
    from liverl.io.registry import ModelRegistry
    from liverl.privacy import audit_log
    from liverl.privacy.erase_audit import erase_audit_artifacts
    from liverl.privacy.erase_table import erase_rows
    from liverl.privacy.erase_traces import erase_traces, scrub_sqlite
    from liverl.privacy.lineage_report import exclude, table_versions_of, trained_on
    from pipelines.distill import state_uri
    from pipelines.erase_staged import erase_staged_sessions

    started = time.perf_counter()
    erasure_id = secrets.token_hex(8)
    subject, tenant = plan.subject, plan.subject.tenant
    whole = subject.scope == "tenant"
    # Logged before the first key is destroyed: an erasure cut short (a crash, a store that fails) is on record
    audit_log.append(config.privacy.audit_log, {"erasure_id": erasure_id, "at_ms": int(time.time() * 1000),
                                                "operator": operator, "tenant": tenant, "scope": subject.scope,
                                                "status": "started"})
    keys = store.forget_tenant(tenant) if whole else store.forget(tenant, sorted(subject.sessions), subject.user)
    rows = erase_rows(config.table.trajectories_uri, subject, "trajectory_id")
    letters = erase_rows(config.table.dead_letters_uri, subject, "dead_letter_id")
    staged = erase_staged_sessions(state_uri(config), subject.holds, subject.holds_subject)
    table_versions = table_versions_of(config.table.trajectories_uri, rows.batch_ids)
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    versions = trained_on(registry, table_versions)
    if exclude_versions:
        exclude(registry, versions, erasure_id)
    traces = erase_traces(config.mlflow.tracking_uri, config.mlflow.audit_experiment, subject)
    samples = erase_audit_artifacts(config.mlflow.tracking_uri, config.mlflow.audit_experiment, subject)
    embedded_db = config.stack.data_dir / "mlflow" / "mlflow.db"
    scrubbed = config.mlflow.tracking_uri == f"http://{config.stack.mlflow_host}:{config.stack.mlflow_port}" \
        and scrub_sqlite(embedded_db)
    sessions = purge_sessions(spool_dir(config) / "sessions.sqlite", tenant, None if whole else set(subject.sessions),
                              subject.user, whole_tenant=whole)
    entry = {"erasure_id": erasure_id, "at_ms": int(time.time() * 1000), "operator": operator, "tenant": tenant,
             "scope": subject.scope, "status": "done", "known": plan.known, "recorded_as_opt_out": not plan.known,
             "keys_destroyed": keys, "sessions_known": len(subject.sessions),
             "table_rows": rows.rows, "table_files_vacuumed": rows.files_removed, "dead_letters": letters.rows,
             "staged": staged, "staged_sessions": sum(staged.values()),
             "traces": traces, "audit_samples": samples, "tracking_db_scrubbed": bool(scrubbed),
             "capture_sessions": sessions, "table_versions": sorted(table_versions), "trained_versions": versions,
             "versions_excluded": versions if exclude_versions else [],
             "seconds": round(time.perf_counter() - started, 3)}
    audit_log.append(config.privacy.audit_log, entry)
    return entry
