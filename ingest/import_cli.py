"""`liverl import`: publish a team's existing agent traces as sessions, for the pipelines to distill.

    liverl import --format swe-agent --tenant acme --tokenizer ./policy runs/*.traj

Imported model calls carry origin "import:<format>", policy version "import" and no behaviour
logprobs: they are off-policy data, never trained with an importance ratio. Token ids are rebuilt
with the policy's tokenizer (--tokenizer, or serving.policy_dir). Re-importing a file publishes the
same event ids, which the pipelines dedupe. Prints one summary line; bad input is reported per place.
"""

from __future__ import annotations

FORMAT_CHOICES = ("openai-chat", "swe-agent", "otlp")  # keep in step with ingest.importers.importer.FORMATS


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files to import")
    parser.add_argument("--format", required=True, choices=FORMAT_CHOICES, help="the files' format")
    parser.add_argument("--tenant", required=True, help="tenant the sessions belong to")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="the policy's Hugging Face folder whose tokenizer rebuilds token ids "
                             "(default: serving.policy_dir)")
    parser.add_argument("--user", default="",
                        help="end user of every session whose source names none (OpenAI `user`, OTLP user.id): "
                             "stored as the tenant's keyed pseudonym, so `liverl forget --user` finds these "
                             "sessions; sessions of users in ingest.opt_out_users, or erased by `liverl forget`, "
                             "are dropped and counted apart")
    parser.add_argument("--task-family", help="task family of every imported session (default: per format)")
    parser.add_argument("--spool-dir", metavar="DIR",
                        help="spool for records Kafka did not take in time (default: <stack.data_dir>/import/spool)")
    parser.add_argument("--dry-run", action="store_true", help="read, build and count, publish nothing")


def run(config, args) -> int:
    import logging
    import time
    from pathlib import Path

    from ingest.importers.build import SessionBuilder
    from ingest.importers.importer import import_files
    from liverl.access.opt_out import OptOut
    from liverl.privacy import tenant_redactor

    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # the writer logs what matters
    tenant = _checked_tenant(args.tenant, config)
    tokenizer = _load_tokenizer(args.tokenizer or config.serving.policy_dir)
    builder = SessionBuilder(tenant, args.format, tokenizer, tenant_redactor(config, tenant),
                             fallback_time_ms=int(time.time() * 1000))
    paths = [Path(p) for p in args.paths]
    opt_out = OptOut.of(config.ingest)
    chosen = dict(task_family=args.task_family, user_id=args.user,
                  opted_out=lambda user: opt_out.user(tenant, user))
    if args.dry_run:
        summary = import_files(args.format, paths, builder, None, **chosen)
        spooled = 0
    else:
        from ingest.importers.publish import Publisher, records_of

        spool_dir = Path(args.spool_dir) if args.spool_dir else config.stack.data_dir / "import" / "spool"
        from ingest.importers.subject import ImportSubject
        from liverl.privacy import sealer_for

        subject = ImportSubject.of(config, tenant)
        sealer = sealer_for(config, subject.pseudonyms)
        with Publisher(config.kafka, spool_dir, seal=sealer.seal_all if sealer else None) as publisher:
            def publish(session, built) -> bool:
                owned = subject.owned(built, session.user_id)
                if owned is None:  # its user or it was forgotten: nothing of it is published again
                    return False
                publisher.write(records_of(owned, tenant, config.kafka))
                return True
            summary = import_files(args.format, paths, builder, publish, **chosen)
        spooled = publisher.spooled()
    for line in summary.lines():
        print(("dry run: " if args.dry_run else "") + line, flush=True)
    if spooled:
        print(f"{spooled} records wait in the spool {spool_dir} (Kafka did not acknowledge them in time); "
              "run `liverl import` again once Kafka is reachable: it sends them first", flush=True)
    return 1 if summary.skipped and not summary.sessions else 0


def _checked_tenant(tenant: str, config) -> str:
    if not tenant or "/" in tenant or not tenant.isprintable():
        raise ValueError(f"--tenant {tenant!r} is not a valid tenant id: use printable characters and no '/' "
                         "(the Kafka key is '<tenant>/<session>')")
    if tenant in config.ingest.opt_out_tenants:
        raise ValueError(f"tenant {tenant!r} opted out (ingest.opt_out_tenants): its traces must not be imported")
    return tenant


def _load_tokenizer(folder):
    if folder is None:
        raise ValueError("no tokenizer: pass --tokenizer DIR (the policy's Hugging Face folder) or set "
                         "serving.policy_dir; token ids must be the policy's own")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))
