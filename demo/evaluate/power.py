"""How wide the held-out paired interval of another plan would be, estimated from a paired result already played.

    python -m demo.evaluate power RESULT.json [--part out-of-template] [--plan 70x3 --plan 210x3 ...]

RESULT.json is what `python -m demo.evaluate heldout --adapter DIR --json RESULT.json` wrote (the base and the
adapter on the same tasks under the same seeds). A task's paired difference, adapter minus base averaged over its
seeds, varies for two reasons: training changed some tasks more than others (the between-task variance) and every
play is a sample (the within-task variance of one seed's difference). A plan of n tasks x s seeds has the standard
error sqrt((between + within / s) / n): more seeds shrink only the second share, more tasks both. Choose a plan on
a result of the dev split, never on the final split the plan will report.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demo.evaluate.stats import t_quantile
from demo.product.tasks.chat.base import OUT_OF_TEMPLATE, PARTS


@dataclass(frozen=True)
class VarianceShares:
    """The paired difference's variance, split: `between` tasks (of a task's true difference) and `within` a task
    (of one seed's difference about the task's own), from `tasks` tasks under `seeds` seeds each."""

    tasks: int
    seeds: int
    difference: float
    between: float
    within: float

    def standard_error(self, tasks: int, seeds: int) -> float:
        return math.sqrt((self.between + self.within / seeds) / tasks)

    def half_width(self, tasks: int, seeds: int) -> float:
        """Half the 95 % interval (Student t over tasks, as the evaluator gives it) of a plan of tasks x seeds."""
        return t_quantile(tasks - 1) * self.standard_error(tasks, seeds)


def variance_shares(before: Sequence[Sequence[bool]], after: Sequence[Sequence[bool]]) -> VarianceShares:
    """The shares of paired outcomes (before[i][s]: task i under seed s, the same seeds on both sides; at least two
    tasks and two seeds, or the shares cannot be told apart). The between-task share is the task means' variance
    less the part the seeds put there (within / seeds), and never below zero."""
    if len(before) != len(after) or len(before) < 2:
        raise ValueError(f"variance shares need at least two paired tasks (got {len(before)} and {len(after)})")
    seeds = {len(row) for row in (*before, *after)}
    if len(seeds) != 1 or min(seeds) < 2:
        raise ValueError("variance shares need every task played under the same number of seeds, at least two")
    count = seeds.pop()
    differences = [[int(a) - int(b) for b, a in zip(row_before, row_after)] for row_before, row_after in
                   zip(before, after)]
    means = [statistics.fmean(row) for row in differences]
    within = statistics.fmean(statistics.variance(row) for row in differences)
    between = max(0.0, statistics.variance(means) - within / count)
    return VarianceShares(len(means), count, statistics.fmean(means), between, within)


def shares_of_result(result: dict, part: str) -> VarianceShares:
    """The shares of one part (out-of-template or in-template) of a paired evaluator result."""
    if "base" not in result or "adapter" not in result:
        raise ValueError("not a paired result: play it with --adapter (the base and an adapter on the same seeds)")
    base, adapter = result["base"]["outcomes"], result["adapter"]["outcomes"]
    if [(o["key"], o["part"]) for o in base] != [(o["key"], o["part"]) for o in adapter]:
        raise ValueError("the base's and the adapter's outcomes are not of the same tasks in the same order")
    pairs = [(b["success"], a["success"]) for b, a in zip(base, adapter) if b["part"] == part]
    if not pairs:
        raise ValueError(f"the result has no {part} tasks")
    return variance_shares([b for b, _ in pairs], [a for _, a in pairs])


def parse_plan(text: str) -> tuple[int, int]:
    """'210x3' -> (210 tasks, 3 seeds)."""
    match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
    if not match or int(match[1]) < 2 or int(match[2]) < 1:
        raise argparse.ArgumentTypeError(f"a plan is TASKSxSEEDS with at least 2 tasks and 1 seed, got {text!r}")
    return int(match[1]), int(match[2])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.evaluate power", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path, help="a paired result JSON of `python -m demo.evaluate heldout`")
    parser.add_argument("--part", choices=PARTS, default=OUT_OF_TEMPLATE)
    parser.add_argument("--plan", type=parse_plan, action="append", default=[],
                        help="tasks of the part x seeds, e.g. 36x3 (repeat; default: the result's own plan)")
    args = parser.parse_args(argv)
    try:
        shares = shares_of_result(json.loads(args.result.read_text()), args.part)
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"{args.result}: {error}")
    print(f"{args.part}: {shares.tasks} tasks x {shares.seeds} seeds, difference {shares.difference:+.3f}; "
          f"variance between tasks {shares.between:.4f}, within a task (one seed) {shares.within:.4f}")
    for tasks, seeds in args.plan or [(shares.tasks, shares.seeds)]:
        print(f"  {tasks:4d} tasks x {seeds} seeds ({tasks * seeds:4d} plays): standard error "
              f"{shares.standard_error(tasks, seeds):.4f}, 95 % half-width {shares.half_width(tasks, seeds):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
