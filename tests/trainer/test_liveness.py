"""The trainer stays live while the gate refuses: staleness counts promotions, not candidates, so traffic served
by a champion that stays put keeps training; ten refusals in a row later, a good candidate is promoted."""

from __future__ import annotations

import pytest

from liverl.contracts import names
from tests.trainer.conftest import commit_batch, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.registry import Registry
from trainer.loop import Trainer

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow


def test_ten_refusals_in_a_row_then_a_promotion(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    config.trainer.gate.max_nll_increase = -10.0  # no candidate can pass: force refusals
    base = register_base(config, tiny_policy_dir, say=lambda *_: None)
    uri = config.table.trajectories_uri
    commit_batch(uri, trajectories.batch("a", 80), "batch-a", 0)  # all served by the champion, v1
    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    registered = trainer.run(follow=False)
    print("\n".join(lines))
    registry = Registry(config.mlflow)
    assert registered >= 10 > config.trainer.staleness.max_version_lag  # far past the old "K candidates" limit
    shared = trainer.state.groups[SHARED_GROUP]
    superseded = sum("not judged (superseded by" in line for line in lines)  # the judging gate's pace: no refusal
    assert shared.gate_refusals == registered - superseded > 0
    assert registry.alias_version(names.ALIAS_CHAMPION) == base
    assert not any("'stale'" in line for line in lines)  # nothing dropped: no promotion since v1 served it
    # the progress line says so (the gate judges beside training, so a step sees the refusals reached by then)
    assert any(line.startswith("step ") and "blocked: gate refused" in line for line in lines)
    run = registry.client.get_run(next(mv for mv in registry.versions() if mv.version != base).run_id)
    assert "gate_refusals_in_a_row" in run.data.metrics

    config.trainer.gate.max_nll_increase = 0.5  # the gate is sound again
    commit_batch(uri, trajectories.batch("b", 8), "batch-b", 1)
    assert trainer.run(follow=False) >= 1
    print("\n".join(lines))
    promoted = registry.alias_version(names.ALIAS_CHAMPION)
    assert promoted == registry.alias_version(names.ALIAS_CANDIDATE) != base, lines[-3:]
    assert registry.tags(promoted)[names.TAG_GATE_DECISION] == "pass" and shared.gate_refusals == 0
    served = trainer.groups[SHARED_GROUP].served
    assert served.promoted[0] == int(base) and served.promoted[-1] == int(promoted)
