"""Tenant aliases and serving.tenants: names that cannot be an alias are refused, and settings that would let vLLM
evict adapters behind serving's back (or serve none) are refused at load."""

import pytest
from pydantic import ValidationError

from liverl.config.serving import ServingConfig, TenantServingConfig
from liverl.contracts.names import tenant_champion_alias


def test_a_tenant_alias_is_champion_dash_tenant_and_odd_names_are_refused():
    assert tenant_champion_alias("acme") == "champion-acme"
    assert tenant_champion_alias("a-1") == "champion-a-1"
    assert tenant_champion_alias("x" * 40) == "champion-" + "x" * 40
    for bad in ("", "Acme", "a_b", "a.b", "x" * 41, "acme ", "é"):
        with pytest.raises(ValueError, match="lowercase letters, digits or '-'"):
            tenant_champion_alias(bad)


def test_watched_tenants_are_checked_and_bounded():
    assert TenantServingConfig(watch=["acme", "globex"]).active
    assert not TenantServingConfig().active
    with pytest.raises(ValidationError, match="lowercase letters"):
        TenantServingConfig(watch=["Acme"])
    with pytest.raises(ValidationError, match="max_tenants"):
        TenantServingConfig(watch=["a", "b", "c"], max_tenants=2)
    with pytest.raises(ValidationError):
        TenantServingConfig(max_resident_adapters=0)


def test_tenant_adapters_on_vllm_need_lora_and_room_beside_the_shared_adapters():
    with pytest.raises(ValidationError, match="serving.lora.enabled = true"):
        ServingConfig(engine="vllm", tenants={"watch": ["acme"]})
    with pytest.raises(ValidationError, match="exceeds serving.lora.max_cpu_loras"):
        ServingConfig(engine="vllm", lora={"enabled": True, "max_cpu_loras": 8},
                      tenants={"watch": ["acme"], "max_resident_adapters": 6})
    fits = ServingConfig(engine="vllm", lora={"enabled": True, "max_cpu_loras": 8},
                         tenants={"watch": ["acme"], "max_resident_adapters": 5})
    assert fits.tenants.max_resident_adapters + 3 == fits.lora.max_cpu_loras
    assert ServingConfig(engine="hf", tenants={"discover": True}).tenants.active  # the light engine needs no slots
