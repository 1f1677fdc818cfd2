"""Versions trained on an erased subject's data: found from their lineage (descendants included) on the real
MLflow registry, and never promoted once `liverl forget --exclude-versions` tagged them."""

from __future__ import annotations

import uuid

from liverl.contracts import names
from liverl.io.lineage import Lineage, encode
from liverl.privacy.lineage_report import exclude, trained_on
from tests.trainer.test_gate_promotion import Judged
from trainer.io.registry import Registry


def test_the_versions_trained_on_the_subject_are_named_and_never_promoted(stack, tiny_policy_dir):
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"policy-{uuid.uuid4().hex[:8]}"
    registry = Registry(config.mlflow)
    lineages = [Lineage(), Lineage(table_versions=(3, 4), parent_version="1"),
                Lineage(table_versions=(7,), parent_version="2"), Lineage(table_versions=(8,), parent_version="1")]
    for index, lineage in enumerate(lineages):
        assert registry.register(tiny_policy_dir, encode(lineage), f"v{index + 1}") == str(index + 1)
    registry.set_alias(names.ALIAS_CHAMPION, "1")

    assert trained_on(registry, {4}) == ["2", "3"]  # v3 was trained on from v2: it inherits what v2 learnt
    assert trained_on(registry, set()) == []
    exclude(registry, ["2", "3"], "erasure-1")

    result = Judged(registry).judge("2", checkpoint=None)  # the gate would pass it
    assert result.decision == "fail" and "excluded from promotion" in result.reasons[0]
    assert registry.alias_version(names.ALIAS_CHAMPION) == "1"
    assert Judged(registry).judge("4", checkpoint=None).decision == "pass"  # untouched versions still promote
    assert registry.alias_version(names.ALIAS_CHAMPION) == "4"
