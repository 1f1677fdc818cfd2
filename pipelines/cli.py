"""`liverl distill`: distill Kafka into the trajectory table, once or every pipelines.follow_interval_s.

    liverl distill                       one batch: from the last committed offsets to the high-water mark
    liverl distill --follow              a new batch every follow_interval_s, until Ctrl-C
    liverl distill --follow --max-batches 3 --pipelines.follow_interval_s 2

Prints one line per batch: batch id, sessions, trajectories, dead letters, offsets, table version.
"""

from __future__ import annotations

import time


def add_arguments(parser) -> None:
    parser.add_argument("--follow", action="store_true", help="keep distilling a new batch every interval")
    parser.add_argument("--max-batches", type=int, default=0, metavar="N",
                        help="with --follow: stop after N batch attempts (0: run until interrupted)")


def run(config, args) -> int:
    from pipelines.distill import distill_once

    attempts = 0
    while True:
        started = time.monotonic()
        report = distill_once(config)
        print(report.line(), flush=True)
        attempts += 1
        if not args.follow or (args.max_batches and attempts >= args.max_batches):
            return 0
        time.sleep(max(0.0, config.pipelines.follow_interval_s - (time.monotonic() - started)))
