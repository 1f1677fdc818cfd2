"""Real-model product traffic: sessions of the three families from the TRAINING task generator, concurrently,
until a count, a duration or a stop event. Session i is a task of families[i % len(families)] drawn with its
own seeded random.Random, so a seed fixes the tasks and the users."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from demo.product.feedback import DelayedFeedback
from demo.product.real.frozen_helpers import FrozenHelpers
from demo.product.real.http_policy import HttpChatPolicy
from demo.product.real.session import run_real_session
from demo.product.session import SessionStats
from demo.product.tasks_real.generate import FAMILIES, training_task
from demo.product.traffic import TrafficStats


def run_real_traffic(policy: HttpChatPolicy, helpers: FrozenHelpers, recorder, *, n_sessions: int | None = None,
                     duration_s: float | None = None, seed: int = 0, concurrency: int = 1,
                     families: Sequence[str] = tuple(FAMILIES), feedback_delay_s: float = 2.0,
                     sessions_per_s: float = 0.0, stop: threading.Event | None = None,
                     on_session: Callable[[SessionStats], None] | None = None) -> TrafficStats:
    """Run sessions until n_sessions started and finished, duration_s passed or `stop` is set."""
    if n_sessions is None and duration_s is None and stop is None:
        raise ValueError("give n_sessions, duration_s or a stop event, or the traffic never ends")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"unknown real task families {unknown}; choose from {', '.join(FAMILIES)}")
    stats, lock = TrafficStats(), threading.Lock()
    feedback = DelayedFeedback()
    began = time.monotonic()
    deadline = None if duration_s is None else began + duration_s

    def one(index: int) -> None:
        rng = random.Random(seed * 1_000_003 + index)
        family = families[index % len(families)]
        task = training_task(family, rng, f"real-{family}-{seed}-{index}")
        result = run_real_session(task, policy, helpers, recorder, rng, feedback=feedback,
                                  feedback_delay_s=feedback_delay_s, user_id=f"user-{rng.randrange(100)}", seed=seed)
        with lock:
            stats.sessions.append(result)
        if on_session is not None:
            on_session(result)

    def keep_going(started: int) -> bool:
        if (stop is not None and stop.is_set()) or (deadline is not None and time.monotonic() >= deadline):
            return False
        return n_sessions is None or started < n_sessions

    def arrival_wait(started: int) -> None:
        while sessions_per_s > 0 and (delay := began + started / sessions_per_s - time.monotonic()) > 0:
            if stop is not None and stop.is_set():
                return
            time.sleep(min(delay, 0.2))

    started = 0
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="demo-real-session") as pool:
            running: set = set()
            while keep_going(started) or running:
                while keep_going(started) and len(running) < max(1, concurrency):
                    arrival_wait(started)
                    if not keep_going(started):
                        break
                    running.add(pool.submit(one, started))
                    started += 1
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    if future.exception() is not None:
                        stats.errors.append(f"{type(future.exception()).__name__}: {future.exception()}")
    finally:
        feedback.close(send_pending=True)
        stats.feedback_sent, stats.feedback_failed = feedback.sent, feedback.failed
    return stats
