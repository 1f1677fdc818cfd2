"""Draw the next optimizer step's trajectories from the stream: filter, weigh, and fit the token budget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from liverl.config.trainer import TrainerConfig
from liverl.io.table_history import TableCommit
from liverl.privacy.row_sealing import RowOpener
from liverl.privacy.sealing import Forgotten
from trainer.io.row_stream import RowStream
from trainer.io.served_lineage import ServedLineage
from trainer.step.batching import Sample, trajectory_samples
from trainer.step.packing import micro_batches as layout
from trainer.step.staleness import assess
from trainer.step.trajectory import Trajectory, from_row, holdout_key, is_held_out


@dataclass
class StepPlan:
    trajectories: list[Trajectory] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)  # staleness weight per trajectory
    lags: list[int] = field(default_factory=list)  # promotions since each row considered was served, kept or dropped
    skipped: Counter = field(default_factory=Counter)  # reason -> rows consumed but not trained
    commits: dict[int, TableCommit] = field(default_factory=dict)  # table versions this step read from
    consumed: int = 0  # rows taken off the stream

    @property
    def empty(self) -> bool:
        return not self.trajectories


def build_step(
    stream: RowStream, trained: dict[str, int], served: ServedLineage | str, now_ms: int, config: TrainerConfig,
    say: Callable[[str], None] = print, world: int = 1, max_tokens: int | None = None,
    opener: RowOpener | None = None,
) -> StepPlan:
    """trained: trajectory_id -> table version it was trained from (a re-committed trajectory is a duplicate).
    served: the champion timeline staleness counts on (a version string: every version up to it served).
    world: data-parallel ranks; the step holds their micro-batches together (each rank trains a share).
    max_tokens: also stop before the windows' tokens would pass this (one tenant's share of a step); the first
    trajectory is taken whatever its size, so a step always moves on.
    opener: opens rows whose token ids are sealed; a row whose subject was forgotten is skipped ("forgotten")."""
    served = ServedLineage.of(served)
    plan = StepPlan()
    micro_batches = config.deepspeed.gradient_accumulation_steps * world
    samples: list[Sample] = []
    tokens = 0
    while (item := stream.peek()) is not None:
        commit, row = item
        try:
            trajectory = from_row(row, commit.version, opener)
        except Forgotten as error:  # erased by `liverl forget`: its token ids can never be read again
            say(f"skip row of table v{commit.version}: {error}")
            _consume(stream, plan, commit, "forgotten")
            continue
        except (ValueError, KeyError, TypeError) as error:
            say(f"skip row of table v{commit.version}: {error}")
            _consume(stream, plan, commit, "invalid")
            continue
        # Imported rows have no behaviour logprobs for the gate to weigh: never held out, always trained.
        if not trajectory.imported and is_held_out(holdout_key(row), config.gate.holdout_fraction):
            _consume(stream, plan, commit, "held_out")
            continue
        if trajectory.trainable_within(config.max_seq_len) == 0:  # e.g. frozen sub-agents: observations only
            _consume(stream, plan, commit, "no_trainable_tokens")
            continue
        if trained.get(trajectory.trajectory_id, commit.version) != commit.version:
            _consume(stream, plan, commit, "already_trained")
            continue
        # Lag in promotions since the row was served (and its age), not in candidates registered since.
        staleness = assess(served.on_timeline(trajectory), served.current, now_ms, config.staleness)
        if staleness.weight == 0.0:
            plan.lags.append(staleness.version_lag)
            _consume(stream, plan, commit, "stale")
            continue
        segments = trajectory_samples(trajectory, staleness.weight, config.max_seq_len)
        # counted in the layout the step will train with (packed rows by default), so it fills its accumulation
        if samples and len(layout([*samples, *segments], config.deepspeed)) > micro_batches:
            break  # the step is full; this row opens the next one
        grown = tokens + sum(len(segment.token_ids) for segment in segments)
        if samples and max_tokens is not None and grown > max_tokens:
            break  # this group's share of the step is drawn; the row opens its next share
        samples += segments
        tokens = grown
        plan.trajectories.append(trajectory)
        plan.weights.append(staleness.weight)
        plan.lags.append(staleness.version_lag)
        trained[trajectory.trajectory_id] = commit.version
        _consume(stream, plan, commit, None)
    return plan


def _consume(stream: RowStream, plan: StepPlan, commit: TableCommit, skipped: str | None) -> None:
    plan.commits[commit.version] = commit
    plan.consumed += 1
    if skipped:
        plan.skipped[skipped] += 1
    stream.advance()
