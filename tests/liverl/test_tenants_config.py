"""trainer.tenants: which tenants get an adapter of their own, and each tenant's token budget per step."""

import pytest
from pydantic import ValidationError

from liverl.config import load_config


def test_off_by_default_and_set_from_the_command_line():
    assert load_config(environ={}, overrides=[]).trainer.tenants.adapters == []
    tenants = load_config(environ={}, overrides=["--trainer.tenants.adapters", '["acme", "globex"]',
                                                 "--trainer.tenants.tokens_per_step", "512"]).trainer.tenants
    assert tenants.adapters == ["acme", "globex"] and tenants.tokens_per_step == 512


@pytest.mark.parametrize("overrides, message", [
    (["--trainer.tenants.adapters", '["Acme"]'], "lowercase letters"),
    (["--trainer.tenants.adapters", '["acme", "acme"]'], "more than once"),
    (["--trainer.tenants.tokens_per_step", "0"], "greater than or equal to 1"),
    (["--trainer.tenants.adapters", '["acme"]', "--trainer.lora.enabled", "false"], "lora.enabled"),
])
def test_bad_tenant_settings_are_refused_with_what_to_do(overrides, message):
    with pytest.raises(ValidationError, match=message):
        load_config(environ={}, overrides=overrides)
