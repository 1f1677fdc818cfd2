"""Product traffic: many sessions across the task families, concurrently, for a count or a duration.

The toy policy plays the grammar tasks (demo.product.tasks, session.py); a chat model plays the chat tasks
(demo.product.tasks.chat, chat_session.py) when the traffic is given the orchestrator's frozen helpers.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from demo.product.feedback import DelayedFeedback
from demo.product.session import SessionStats, run_session
from demo.product.tasks import FAMILIES, OutcomeReport, Task, make_task
from demo.product.user import SimulatedUser, UserModel

DEFAULT_FAMILIES = tuple(FAMILIES)


@dataclass
class TrafficStats:
    """Every finished session, in the order they finished. Produced by run_traffic, consumed by the demo."""

    sessions: list[SessionStats] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # sessions that failed (e.g. the policy was unreachable)
    feedback_sent: int = 0
    feedback_failed: int = 0

    def mean_reward(self, family: str | None = None) -> float:
        rewards = [s.reward for s in self.sessions if family is None or s.family == family]
        return statistics.fmean(rewards) if rewards else float("nan")

    def by_version(self) -> dict[str, list[SessionStats]]:
        """Sessions grouped by the version that served them, versions in the order first served."""
        groups: dict[str, list[SessionStats]] = defaultdict(list)
        for s in sorted(self.sessions, key=lambda s: s.ended_at):
            groups[s.served_version].append(s)
        return dict(groups)

    def mean_reward_by_version(self) -> dict[str, float]:
        return {v: statistics.fmean(s.reward for s in group) for v, group in self.by_version().items()}

    def mean_reward_by_family(self) -> dict[str, float]:
        return {f: self.mean_reward(f) for f in sorted({s.family for s in self.sessions})}


def run_traffic(
    policy,
    recorder,
    *,
    n_sessions: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    concurrency: int = 1,
    families: Sequence[str] = DEFAULT_FAMILIES,
    feedback_delay_s: float = 2.0,
    wait_for_feedback: bool = True,
    user_model: UserModel = UserModel(),
    subagents_call_policy: bool = True,
    user_id_prefix: str = "user",
    stop: threading.Event | None = None,
    on_session: Callable[[SessionStats], None] | None = None,
    sessions_per_s: float = 0.0,
    judge: Callable[[Task, OutcomeReport], OutcomeReport] | None = None,
    helpers=None,
    training_draw: str = "key",
) -> TrafficStats:
    """Run sessions until n_sessions finished, duration_s passed or `stop` is set (whichever comes first).

    Session i is a task of families[i % len(families)] drawn with its own seeded random.Random, so a
    seed fixes the tasks and the users (the policy's sampling has its own randomness). A session that
    raises is counted in TrafficStats.errors and the traffic goes on. sessions_per_s > 0 paces
    session starts like users arriving at that rate (0: a new session as soon as a slot frees). judge: a tenant's
    view of each outcome (run_session).

    helpers: None, the toy product (policy: a Policy, e.g. GrpcPolicy); or the orchestrator's frozen helpers
    (chat_session.FrozenHelpers) for the chat tasks' training split (policy: an HttpChatPolicy; judge,
    subagents_call_policy and the user's coding habits of the toy tasks do not apply). training_draw: how the chat
    tasks are drawn (demo.product.tasks.chat.generate.draw_key: "key" or "template").
    """
    if n_sessions is None and duration_s is None and stop is None:
        raise ValueError("give n_sessions, duration_s or a stop event, or the traffic never ends")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"unknown task families {unknown}; choose from {', '.join(FAMILIES)}")
    stats = TrafficStats()
    user = SimulatedUser(user_model)
    feedback = DelayedFeedback()
    deadline = None if duration_s is None else time.monotonic() + duration_s
    lock = threading.Lock()

    def one(index: int) -> None:
        rng = random.Random(seed * 1_000_003 + index)
        family = families[index % len(families)]
        if helpers is None:
            task = make_task(family, rng, f"{family}-{seed}-{index}")
            result = run_session(
                task, policy, recorder, rng,
                user=user, feedback=feedback, feedback_delay_s=feedback_delay_s,
                user_id=f"{user_id_prefix}-{rng.randrange(100)}", subagents_call_policy=subagents_call_policy,
                judge=judge,
            )
        else:
            from demo.product.chat_session import run_chat_session
            from demo.product.tasks.chat.generate import training_task

            task = training_task(family, rng, f"real-{family}-{seed}-{index}", training_draw)
            result = run_chat_session(task, policy, helpers, recorder, rng, user=user, feedback=feedback,
                                      feedback_delay_s=feedback_delay_s,
                                      user_id=f"{user_id_prefix}-{rng.randrange(100)}", seed=seed)
        with lock:
            stats.sessions.append(result)
        if on_session is not None:
            on_session(result)

    def keep_going(started: int) -> bool:
        if stop is not None and stop.is_set():
            return False
        if deadline is not None and time.monotonic() >= deadline:
            return False
        return n_sessions is None or started < n_sessions

    started = 0
    began = time.monotonic()

    def wait_for_arrival() -> None:
        """Sleep until session number `started` is due (in short naps, so `stop` is honoured)."""
        if sessions_per_s <= 0:
            return
        while (delay := began + started / sessions_per_s - time.monotonic()) > 0:
            if stop is not None and stop.is_set():
                return
            time.sleep(min(delay, 0.2))

    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="demo-session") as pool:
            running = set()
            while keep_going(started) or running:
                while keep_going(started) and len(running) < max(1, concurrency):
                    wait_for_arrival()
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
        feedback.close(send_pending=wait_for_feedback)
        stats.feedback_sent, stats.feedback_failed = feedback.sent, feedback.failed
    return stats
