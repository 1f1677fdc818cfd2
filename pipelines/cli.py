"""`liverl distill`: distill Kafka into the trajectory table, once or every pipelines.follow_interval_s.

    liverl distill                       one batch: from the last committed offsets to the high-water mark
    liverl distill --follow              a new batch every follow_interval_s, until Ctrl-C (or SIGTERM)
    liverl distill --follow --max-batches 3 --pipelines.follow_interval_s 2

Prints one line per batch: batch id, sessions, trajectories, dead letters, offsets, table version. --follow
also applies pipelines.*_retention_days every retention_interval_s, between batches (pipelines/retention.py). With
--follow the MLflow audit runs on a background thread (pipelines/audit_follower.py), so the next batch does
not wait for it; the line then ends with the audit's lag (committed batches not audited yet) and failures.
A --max-batches run waits for the audit to catch up before it exits.
"""

from __future__ import annotations

import signal
import sys
import threading
import time


def add_arguments(parser) -> None:
    parser.add_argument("--follow", action="store_true", help="keep distilling a new batch every interval")
    parser.add_argument("--max-batches", type=int, default=0, metavar="N",
                        help="with --follow: stop after N batch attempts (0: run until interrupted)")


def run(config, args) -> int:
    from pipelines.distill import distill_once, state_uri

    if not (args.follow and config.pipelines.audit):
        return _loop(config, args, distill_once, None)
    from pipelines.audit_follower import AuditFollower
    from pipelines.state import StateStore

    auditor = AuditFollower(config, StateStore(state_uri(config)))
    main_thread = threading.current_thread() is threading.main_thread()
    # SIGTERM runs the finally below, as Ctrl-C does (only the main thread may set a handler)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main_thread else None
    try:
        code = _loop(config, args, distill_once, auditor)
        if not auditor.drain():
            print(f"audit: {auditor.lag()} batches not audited yet; the next `liverl distill` audits them",
                  file=sys.stderr, flush=True)
        return code
    finally:
        auditor.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _loop(config, args, distill_once, auditor) -> int:
    attempts = 0
    retention_due = time.monotonic()  # the first right after the first batch
    while True:
        started = time.monotonic()
        report = distill_once(config, auditor=auditor)
        audit = f" | audit lag {auditor.lag()} failures {auditor.failures}" if auditor else ""
        print(report.line() + audit, flush=True)
        attempts += 1
        if args.follow and time.monotonic() >= retention_due and _retention_configured(config):
            from pipelines.retention import apply_retention

            print(apply_retention(config).line(), flush=True)  # between batches: never races a commit of ours
            retention_due = time.monotonic() + config.pipelines.retention_interval_s
        if not args.follow or (args.max_batches and attempts >= args.max_batches):
            return 0
        time.sleep(max(0.0, config.pipelines.follow_interval_s - (time.monotonic() - started)))


def _retention_configured(config) -> bool:
    return bool(config.pipelines.table_retention_days or config.pipelines.trace_retention_days)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
