"""Staleness counts versions promoted to champion since a row was served, not candidates registered since."""

from __future__ import annotations

from liverl.config.trainer import StalenessConfig
from trainer.io.served_lineage import ServedLineage
from trainer.step.staleness import assess
from trainer.step.trajectory import Trajectory


def _served_by(*versions: str) -> Trajectory:
    return Trajectory("t", 0, "coding", "", "single", versions, (1, 2), (0, 1), (0.0, -1.0), first_served_ms=1)


def test_lag_is_the_promotions_after_the_serving_version():
    served = ServedLineage((1, 7, 12))  # 2..6 and 8..11 were refused candidates: they never served
    assert [served.lag(v) for v in ("1", "5", "7", "12", "20")] == [2, 2, 1, 0, 0]
    config = StalenessConfig(max_version_lag=1)
    assert assess(served.on_timeline(_served_by("7")), served.current, 1, config).weight == 1.0
    assert assess(served.on_timeline(_served_by("1", "7")), served.current, 1, config).version_lag == 2
    assert assess(served.on_timeline(_served_by("v-x")), served.current, 1, config).weight == 0.0  # unknown


def test_a_version_string_means_every_version_served_in_turn():
    assert ServedLineage.of("5") == ServedLineage((1, 2, 3, 4, 5))
    assert ServedLineage.of("5").lag("1") == 4
