"""`liverl forget`: erase a data subject from every store, record the erasure, name the versions it trained.

    liverl forget --tenant acme --user dave@example.com        # one user: all their sessions
    liverl forget --tenant acme --session conv-17              # one session
    liverl forget --tenant acme                                # the whole tenant
    liverl forget --tenant acme --user dave --exclude-versions # and keep the versions trained on them unpromoted

In this order: the subject's keys are destroyed and tombstoned first (from then on every copy of their
records in Kafka, spools and backups is unreadable, and capture, serving, import and replay drop anything new
of theirs); then their rows leave the trajectory and dead-letter tables (files rewritten, history vacuumed),
the distiller's staged copies of them (trace sources) are rewritten without them, their MLflow traces are deleted (the embedded tracking database rebuilt), the capture service's session state
is purged. One JSON line goes to the audit log (privacy.audit_log) and the same summary is printed, with the
registered versions trained on the subject's data.
"""

from __future__ import annotations

import getpass
import json
import secrets
import time


def add_arguments(parser) -> None:
    parser.add_argument("--tenant", required=True, help="the tenant whose subject is erased (alone: the whole tenant)")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--user", help="the user id as the product sends it: every session of theirs")
    who.add_argument("--session", help="one session id as the product knows it")
    parser.add_argument("--exclude-versions", action="store_true",
                        help="tag the registered versions trained on the subject's data so the gate never promotes them")
    parser.add_argument("--operator", default=None, help="who asked for the erasure (default: the OS user)")


def run(config, args) -> int:
    summary = forget(config, args.tenant, args.user, args.session, args.exclude_versions,
                     args.operator or getpass.getuser())
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


def forget(config, tenant: str, user: str | None = None, session: str | None = None, exclude_versions: bool = False,
           operator: str = "") -> dict:
    """Erase the subject everywhere (see the module doc); returns the audit entry, also appended to the log."""
    from ingest.service import spool_dir
    from ingest.sessions import purge_sessions
    from liverl.io.registry import ModelRegistry
    from liverl.privacy import key_store
    from liverl.privacy import audit_log
    from liverl.privacy.erase_table import erase_rows
    from liverl.privacy.erase_traces import erase_traces, scrub_sqlite
    from liverl.privacy.lineage_report import exclude, table_versions_of, trained_on
    from liverl.privacy.subject import resolve
    from liverl.redaction import Redactor
    from pipelines.distill import state_uri
    from pipelines.erase_staged import erase_staged_sessions

    started = time.perf_counter()
    erasure_id = secrets.token_hex(8)
    store = key_store(config)
    subject = resolve(store, tenant, user, session, Redactor(config.ingest.redaction, tenant).redact_id)
    session_names = None if subject.scope == "tenant" else \
        {subject.pseudonyms.session(tenant, s) for s in ({session} if session else set())} | set(subject.sessions)
    if subject.scope == "tenant":
        keys = store.forget_tenant(tenant)
    else:
        keys = store.forget(tenant, sorted(subject.sessions), subject.user)
    rows = erase_rows(config.table.trajectories_uri, subject, "trajectory_id")
    letters = erase_rows(config.table.dead_letters_uri, subject, "dead_letter_id")
    staged = erase_staged_sessions(state_uri(config), subject.holds)
    table_versions = table_versions_of(config.table.trajectories_uri, rows.batch_ids)
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    versions = trained_on(registry, table_versions)
    if exclude_versions:
        exclude(registry, versions, erasure_id)
    traces = erase_traces(config.mlflow.tracking_uri, config.mlflow.audit_experiment, subject)
    embedded_db = config.stack.data_dir / "mlflow" / "mlflow.db"
    scrubbed = config.mlflow.tracking_uri == f"http://{config.stack.mlflow_host}:{config.stack.mlflow_port}" \
        and scrub_sqlite(embedded_db)
    sessions = purge_sessions(spool_dir(config) / "sessions.sqlite", tenant, session_names, subject.user)
    entry = {"erasure_id": erasure_id, "at_ms": int(time.time() * 1000), "operator": operator, "tenant": tenant,
             "scope": subject.scope, "keys_destroyed": keys, "sessions_known": len(subject.sessions),
             "table_rows": rows.rows, "table_files_vacuumed": rows.files_removed, "dead_letters": letters.rows,
             "staged_sessions": staged,
             "traces": traces, "tracking_db_scrubbed": bool(scrubbed), "capture_sessions": sessions,
             "table_versions": sorted(table_versions), "trained_versions": versions,
             "versions_excluded": versions if exclude_versions else [],
             "seconds": round(time.perf_counter() - started, 3)}
    audit_log.append(config.privacy.audit_log, entry)
    return entry
