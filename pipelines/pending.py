"""Sessions the distiller holds back, and why: for its progress line, `liverl status` and a run's own start.

A session is distilled once `pipelines.reward_horizon_s` has passed since its end event (so late feedback joins
it), or `pipelines.idle_timeout_s` since its last event when it never ends (pipelines/sessionize.py). Until then its
records are pending, carried from batch to batch. That wait is invisible from outside: with the production
horizon (an hour) a ten-minute run distills nothing, and the only sign was "sessions 0 (pending N)". So each batch
records how many sessions wait, the Kafka time of the oldest pending record and the settings that hold them, in
its report and in the commit's summary (pipelines/distill.py), and says in words when nothing can come out:

- `waiting`: sessions pend and none was distilled, while the oldest is younger than the settings' wait: the
  horizon holds them (normal after a quiet start, a surprise when the horizon does not fit the run);
- `far past`: the oldest pends longer than twice the longest wait the settings allow (max of horizon and idle
  timeout): such a session should have closed by one rule or the other, so something else is off (producers'
  clocks ahead of the broker's, a session that never stops sending events).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pyarrow.parquet as pq

from liverl.config.pipelines import PipelinesConfig

FAR_PAST_FACTOR = 2.0  # "far longer than usual": past this many times the longest wait the settings allow


@dataclass(frozen=True)
class PendingSessions:
    """What one batch left pending, with the settings that decided it (stored in the commit's summary)."""

    sessions: int
    oldest_record_ms: int | None  # Kafka timestamp of the oldest pending record; None: none pending
    as_of_ms: int  # the batch's clock
    reward_horizon_s: float
    idle_timeout_s: float

    def oldest_age_s(self, now_ms: int | None = None) -> float | None:
        if self.oldest_record_ms is None:
            return None
        return max(0.0, ((self.as_of_ms if now_ms is None else now_ms) - self.oldest_record_ms) / 1000)

    def note(self, now_ms: int | None = None) -> str:
        """"pending 3, oldest 40s, horizon 5s": the counts and the setting that holds them."""
        age = self.oldest_age_s(now_ms)
        oldest = f", oldest {duration(age)}" if age is not None else ""
        return f"pending {self.sessions}{oldest}, horizon {duration(self.reward_horizon_s)}"

    def warning(self, emitted: int | None = None, now_ms: int | None = None) -> str | None:
        """Why nothing comes out, when that is so (see the module docstring); None when all is as usual.

        emitted: sessions the batch distilled (None: unknown, as for `liverl status`)."""
        age = self.oldest_age_s(now_ms)
        if not self.sessions or age is None:
            return None
        longest = max(self.reward_horizon_s, self.idle_timeout_s)
        if age > FAR_PAST_FACTOR * longest:
            return (f"far past: the oldest pending session is {duration(age)} old, more than {FAR_PAST_FACTOR:g}x the "
                    f"longest the settings hold one (pipelines.reward_horizon_s {duration(self.reward_horizon_s)} "
                    f"after its end, pipelines.idle_timeout_s {duration(self.idle_timeout_s)} idle): check that the "
                    f"producers' clocks (event_time_ms) are not ahead of the broker's and that sessions end")
        if not emitted and age < self.reward_horizon_s:
            return (f"waiting: {self.sessions} sessions pend and none can be distilled before "
                    f"{duration(self.reward_horizon_s)} after its end (pipelines.reward_horizon_s) or "
                    f"{duration(self.idle_timeout_s)} idle (pipelines.idle_timeout_s); the oldest is "
                    f"{duration(age)} old. Lower them for a short run (configs/demo.toml: reward_horizon_s = 5)")
        return None

    def to_summary(self) -> dict:
        return asdict(self)

    @classmethod
    def from_summary(cls, summary: dict) -> PendingSessions | None:
        """From a commit's summary JSON; None for commits written before it recorded pending sessions."""
        pending = summary.get("pending")
        return cls(**pending) if isinstance(pending, dict) else None


def pending_sessions(settings: PipelinesConfig, as_of_ms: int, sessions: int, staged_files: tuple[str, ...],
                     filesystem) -> PendingSessions:
    """The batch's pending sessions; the oldest record's time from the staged pending files' Parquet footers."""
    oldest = [_min_timestamp(pq.ParquetFile(path, filesystem=filesystem)) for path in staged_files]
    oldest = [value for value in oldest if value is not None]
    return PendingSessions(sessions=sessions, oldest_record_ms=min(oldest) if oldest else None, as_of_ms=as_of_ms,
                           reward_horizon_s=settings.reward_horizon_s, idle_timeout_s=settings.idle_timeout_s)


def _min_timestamp(parquet: pq.ParquetFile) -> int | None:
    """Smallest timestamp_ms of a pending file: from row-group statistics, else from the one column."""
    column = parquet.schema_arrow.get_field_index("timestamp_ms")
    found = []
    for group in range(parquet.metadata.num_row_groups):
        statistics = parquet.metadata.row_group(group).column(column).statistics
        if statistics is None or not statistics.has_min_max:
            values = parquet.read(columns=["timestamp_ms"]).column(0).drop_null()
            return min(values.to_pylist()) if len(values) else None
        found.append(statistics.min)
    return min(found) if found else None


def impossible_within(window_s: float, settings: PipelinesConfig) -> str | None:
    """Why no session can be distilled within a run of window_s seconds, or None when one can."""
    wait = min(settings.reward_horizon_s, settings.idle_timeout_s)
    if wait < window_s:
        return None
    return (f"no session can become a trajectory within this run's {duration(window_s)}: a session is distilled "
            f"{duration(settings.reward_horizon_s)} after its end (pipelines.reward_horizon_s) or after "
            f"{duration(settings.idle_timeout_s)} idle (pipelines.idle_timeout_s). Lower them (configs/demo.toml sets "
            f"reward_horizon_s = 5) or run longer")


def duration(seconds: float) -> str:
    """12s, 9m12s, 1h0m: short enough for a progress line."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60}m"
