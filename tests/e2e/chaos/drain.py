"""Wait, bounded, until the pipeline has distilled everything: every acknowledged session is in the
trajectory table or a dead letter, and the distiller's commits reach the topics' high-water marks."""

from __future__ import annotations

import time
from collections.abc import Callable

from liverl.io.table_history import TableHistory
from tests.e2e.chaos.ack_proxy import AckProxy
from tests.e2e.chaos.reconcile import index_dead_letters, read_delta


def undistilled_records(config) -> int:
    """Records on the two topics past the last offsets the distiller committed."""
    from pipelines.kafka_source import high_water_marks

    kafka = config.kafka
    committed: dict[tuple[str, int], int] = {}
    for commit in TableHistory(config.table.trajectories_uri).commits_after(-1):
        for topic, parts in commit.kafka_offsets.items():
            for partition, (_first, end) in parts.items():
                key = (topic, int(partition))
                committed[key] = max(committed.get(key, 0), end)
    marks = high_water_marks(kafka.client_kwargs(), [kafka.session_events_topic, kafka.model_calls_topic], committed)
    return sum(max(0, mark - committed.get(key, 0)) for key, mark in marks.items())


def sessions_waiting(config, proxy: AckProxy) -> set[tuple[str, str]]:
    """Acknowledged sessions neither in the trajectory table nor in a session dead letter yet."""
    tabled = {(r["tenant_id"], r["session_id"])
              for r in read_delta(config.table.trajectories_uri, ["tenant_id", "session_id"])}
    letters = index_dead_letters(read_delta(config.table.dead_letters_uri), config.kafka.session_events_topic)
    acked = {event.session_key for event in list(proxy.acked.values())}
    return acked - tabled - set(letters.session_event_ids)


def wait_drained(config, proxy: AckProxy, timeout_s: float, say: Callable[[str], None]) -> tuple[int, int]:
    """(sessions still waiting, records not distilled) when drained or when timeout_s ran out."""
    deadline = time.monotonic() + timeout_s
    last_said = 0.0
    while True:
        waiting, behind = sessions_waiting(config, proxy), undistilled_records(config)
        if (not waiting and not behind) or time.monotonic() > deadline:
            return len(waiting), behind
        if time.monotonic() - last_said > 15:
            last_said = time.monotonic()
            say(f"      draining: {len(waiting)} sessions not distilled yet, {behind} records behind")
        time.sleep(3)
