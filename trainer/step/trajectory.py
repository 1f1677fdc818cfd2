"""The trainer's view of one trajectory-table row, read through the typed `TrajectoryRow` contract.

Long segments are split, not cut: `windows` splits a segment longer than max_seq_len into windows, each scored
with up to max_seq_len tokens of the segment's preceding context. Serving sampled a later window's tokens with
the whole segment before them, which the window does not hold, so their served tokens are marked unscorable
(trainer/step/batching.py `MicroBatch.context_cut`): no importance ratio is formed against a context the trainer did
not see. They train only with loss.exclude_unscorable false; imported (supervised) windows train whole, as
they need no ratio. Train long segments whole by raising max_seq_len to serving's context length.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from liverl.contracts.trajectory_row import TrajectoryRow
from liverl.privacy.row_sealing import RowOpener

UNKNOWN_TEMPERATURE = float("nan")  # a span whose sampling was not recorded: its tokens are unscorable


@dataclass(frozen=True)
class SpanSampling:
    """How the tokens [start, end) of one model call were sampled (its SamplingParams)."""

    start: int
    end: int
    temperature: float = UNKNOWN_TEMPERATURE  # 0: greedy; NaN: unknown (the call did not record it)
    top_p: float = 1.0  # 1: no nucleus truncation
    top_k: int = 0  # <= 0: no top-k truncation


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) fed to the model as one sequence; only [trained_from, end) carry a loss."""

    start: int
    trained_from: int
    end: int
    position_offset: int  # position of `start` within its segment (what serving's positions were)


@dataclass(frozen=True)
class Trajectory:
    """Produced from a committed row of the table (liverl.io.table_history); consumed by the step builder and the
    gate."""

    trajectory_id: str
    table_version: int
    task_family: str
    task_id: str
    agent_role: str
    policy_versions: tuple[str, ...]
    token_ids: tuple[int, ...]  # (T,)
    loss_mask: tuple[int, ...]  # (T,) 1 on tokens the trained policy sampled
    behaviour_logprobs: tuple[float, ...]  # (T,)
    reward_components: dict[str, float] = field(default_factory=dict)
    reward_config_version: str = ""
    signals: dict[str, float] = field(default_factory=dict)
    first_served_ms: int | None = None  # None: unknown (staleness then treats it as older than H)
    # Where each segment begins (0 first); () is one segment. A segment is its own sequence: its completions
    # were sampled conditioned on its tokens only (the context was rewritten where the next one starts).
    segment_starts: tuple[int, ...] = ()
    # The sampling parameters of each model call's span. Tokens outside every span, spans whose call did not
    # record its temperature, and rows written before the columns existed have an unknown (NaN) temperature:
    # scoring marks them unscorable, since no importance ratio against an unknown distribution means anything.
    span_sampling: tuple[SpanSampling, ...] = ()
    # "" served by liverl; "import:<format>" built from a team's existing traces (`liverl import`): no behaviour
    # logprobs (all 0) and no served version, so it is never importance-weighted (trainer/step/losses.py).
    origin: str = ""

    @property
    def imported(self) -> bool:
        return self.origin.startswith("import:")

    def segments(self, max_seq_len: int | None = None) -> list[tuple[int, int]]:
        """[start, end) of each non-empty segment, each cut to its first max_seq_len tokens when given.
        Training uses `windows` instead, which trains the whole segment."""
        starts = self.segment_starts or (0,)
        ends = (*starts[1:], len(self.token_ids))
        return [(start, min(end, start + max_seq_len) if max_seq_len else end)
                for start, end in zip(starts, ends) if end > start]

    def windows(self, max_seq_len: int) -> list[Window]:
        """Each segment as windows of at most max_seq_len tokens that together train every token of it.

        The first window is the segment's first max_seq_len tokens. Each later one trains the next
        max_seq_len // 2 tokens (the stride) and is preceded by as much of the segment as fits in
        max_seq_len, so every token is scored with at least max_seq_len - stride tokens of context (less than
        serving saw: see the module docstring)."""
        stride = max(max_seq_len // 2, 1)
        windows = []
        for start, end in self.segments():
            first_end = min(end, start + max_seq_len)
            windows.append(Window(start, start, first_end, 0))
            trained_from = first_end
            while trained_from < end:
                window_end = min(trained_from + stride, end)
                window_start = window_end - max_seq_len
                windows.append(Window(window_start, trained_from, window_end, window_start - start))
                trained_from = window_end
        return windows

    def token_sampling(self, start: int, end: int) -> tuple[list[float], list[float], list[int]]:
        """Per-token (temperature, top_p, top_k) of tokens [start, end); NaN temperature where unknown."""
        length = end - start
        temperature, top_p, top_k = [UNKNOWN_TEMPERATURE] * length, [1.0] * length, [0] * length
        for span in self.span_sampling:
            for i in range(max(span.start, start), min(span.end, end)):
                temperature[i - start], top_p[i - start], top_k[i - start] = span.temperature, span.top_p, span.top_k
        return temperature, top_p, top_k

    def trainable_within(self, max_seq_len: int | None = None) -> int:
        """Loss-masked tokens that get trained; every one does (windows), except a segment's first token,
        which has no prefix to be predicted from. max_seq_len is accepted for callers that still pass it."""
        return sum(sum(self.loss_mask[start + 1:end]) for start, end in self.segments())

    @property
    def trainable_tokens(self) -> int:
        return self.trainable_within()


def from_row(row: dict, table_version: int, opener: RowOpener | None = None) -> Trajectory:
    """A row as pyarrow's to_pylist gives it; raises ValueError (SchemaVersionError for a newer schema)
    when its columns disagree. opener: opens a row whose token ids are sealed (liverl.privacy.row_sealing);
    raises liverl.privacy.sealing.Forgotten when the row's subject was erased."""
    if opener is not None:
        row = opener.open_row(row)
    typed = TrajectoryRow.from_arrow(row).validate()
    return from_typed_row(typed, table_version)


def from_typed_row(row: TrajectoryRow, table_version: int) -> Trajectory:
    return Trajectory(
        trajectory_id=row.trajectory_id,
        table_version=table_version,
        task_family=row.task_family or "",
        task_id=row.task_id or "",
        agent_role=row.agent_role,
        policy_versions=tuple(row.policy_versions),
        token_ids=tuple(row.token_ids),
        loss_mask=tuple(row.loss_mask),
        behaviour_logprobs=tuple(row.behaviour_logprobs),
        reward_components=dict(row.reward_components),
        reward_config_version=row.reward_config_version or "",
        signals=dict(row.signals),
        first_served_ms=row.first_served_ms,
        segment_starts=_segment_starts(row),
        span_sampling=_span_sampling(row),
        origin=row.origin,
    )


def _segment_starts(row: TrajectoryRow) -> tuple[int, ...]:
    """Rows written before the column existed (null or empty) are one segment."""
    starts, length = list(row.segment_starts), len(row.token_ids)
    if not starts:
        return ()
    if starts[0] != 0 or any(b < a for a, b in zip(starts, starts[1:])) or starts[-1] > length:
        raise ValueError(
            f"trajectory {row.trajectory_id}: segment_starts {starts} must begin at 0 and rise within its "
            f"{length} tokens"
        )
    # A call with no tokens leaves an empty segment (a repeated start, or one at the end): nothing to score.
    return tuple(sorted({start for start in starts if start < length}))


def _span_sampling(row: TrajectoryRow) -> tuple[SpanSampling, ...]:
    """Each column on its own: an empty temperature column is unknown (NaN: unscorable); an empty top_p or top_k
    column leaves its no-op default (no truncation)."""
    if not (row.span_temperature or row.span_top_p or row.span_top_k):
        return ()
    if len(row.span_ends) != len(row.span_starts):
        raise ValueError(f"trajectory {row.trajectory_id}: sampling columns need span_starts and span_ends")
    spans = []
    for i, (start, end) in enumerate(zip(row.span_starts, row.span_ends)):
        spans.append(SpanSampling(
            start, end,
            temperature=float(row.span_temperature[i]) if row.span_temperature else UNKNOWN_TEMPERATURE,
            top_p=float(row.span_top_p[i]) if row.span_top_p else 1.0,
            top_k=int(row.span_top_k[i]) if row.span_top_k else 0,
        ))
    return tuple(spans)


def holdout_key(row: dict) -> str:
    """What the held-out split hashes: the session (tenant, id), or the trajectory for rows without one."""
    session = row.get("session_id")
    return f"{row.get('tenant_id') or ''}/{session}" if session else row["trajectory_id"]


def is_held_out(trajectory_id: str, fraction: float) -> bool:
    """Deterministic split: the same trajectory is held out in every run, on every machine."""
    if fraction <= 0.0:
        return False
    bucket = int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") / 2**64
    return bucket < fraction
