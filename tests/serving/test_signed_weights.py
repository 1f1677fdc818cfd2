"""Serving follows the alias only onto signed weights: a version the trainer's gate did not sign (an alias moved by
hand), one whose files changed after signing, or one whose recorded verdict is "fail" is refused, counted and
tagged, while the version in service keeps serving; a properly signed one is swapped in."""

from __future__ import annotations

import pytest

from liverl.contracts import names
from liverl.io.registry import ModelRegistry
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    register_version,
    serving_config,
    set_alias,
    sign_as_the_gate,
    version_tags,
    wait_for,
)


@pytest.fixture
def config(stack, tmp_path):
    base = module_topics(stack, f"signed-{tmp_path.name}")
    return serving_config(base, tmp_path, f"signed-{tmp_path.name}", record=False)


def test_only_signed_versions_are_served(config, tiny_policy_dir, second_policy_dir):
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    with ServerThread(config) as server:
        refusals = lambda: server.server.metrics.value("liverl_serving_signature_refusals_total")  # noqa: E731

        unsigned = register_version(config, second_policy_dir, signed=False)  # an alias moved by hand
        tampered = register_version(config, second_policy_dir, signed=False)
        sign_as_the_gate(config, tampered, tiny_policy_dir)  # signed over other files than the artifact's
        refused = register_version(config, second_policy_dir)
        assert names.TAG_SIGNATURE in version_tags(config, refused)
        ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model).set_tag(
            refused, names.TAG_GATE_DECISION, "fail")  # a signed candidate the gate later refused

        for count, version in enumerate((unsigned, tampered, refused), start=1):
            set_alias(config, names.ALIAS_CHAMPION, version)
            wait_for(lambda: names.TAG_SERVING_ROLLBACK in version_tags(config, version),
                      what=f"the refusal of v{version}")
            assert server.server.router.champion.version == "1"  # still serving the signed base
            assert refusals() == count
            assert '"reason": "unsigned"' in version_tags(config, version)[names.TAG_SERVING_ROLLBACK]

        signed = register_version(config, second_policy_dir)
        set_alias(config, names.ALIAS_CHAMPION, signed)
        wait_for(lambda: server.server.router.champion.version == signed, what=f"the swap to v{signed}")
        assert refusals() == 3


def test_serving_will_not_start_on_an_unsigned_champion(config, tiny_policy_dir):
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,), signed=False)
    with pytest.raises(Exception, match="carries no signature"):
        with ServerThread(config):
            pass


def test_a_deferred_candidate_serves_only_as_the_canary_the_gate_signed_it_for(config, tiny_policy_dir,
                                                                                second_policy_dir):
    # The gate's live canary (trainer/gate/canary.py) serves a candidate it deferred: signed "canary", never "pass".
    from liverl.io.signing import folder_digest
    from trainer.io.signing import sign_canary, sign_pass

    config.serving.canary_alias, config.serving.canary_fraction = "canary", 0.5
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)

    def deferred(signed_for_canary: bool) -> str:
        version = register_version(config, second_policy_dir, signed=False)
        registry.set_tag(version, names.TAG_GATE_DECISION, "defer")
        if signed_for_canary:
            sign_canary(registry, version, folder_digest(second_policy_dir), config.trainer.signing_key_file)
        return version

    with ServerThread(config) as server:
        refusals = lambda: server.server.metrics.value("liverl_serving_signature_refusals_total")  # noqa: E731
        router = server.server.router
        unsigned, canary = deferred(False), deferred(True)
        set_alias(config, "canary", unsigned)  # an alias moved by hand onto a deferred version
        wait_for(lambda: refusals() == 1, what=f"the refusal of v{unsigned} as the canary")
        assert router.canary is None
        set_alias(config, "canary", canary)
        wait_for(lambda: router.canary is not None and router.canary.version == canary, what=f"v{canary} as canary")
        set_alias(config, names.ALIAS_CHAMPION, canary)  # its canary signature does not make it a champion
        wait_for(lambda: refusals() == 2, what=f"the refusal of v{canary} as champion")
        assert router.champion.version == "1"
        # A deferred candidate the gate promotes now: signed "pass", the alias moved, its "defer" not yet rewritten.
        passing = deferred(False)
        sign_pass(registry, passing, folder_digest(second_policy_dir), config.trainer.signing_key_file)
        set_alias(config, names.ALIAS_CHAMPION, passing)
        wait_for(lambda: router.champion.version == passing, what=f"the swap to v{passing}")
        assert refusals() == 2
