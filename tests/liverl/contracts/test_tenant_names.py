"""The per-tenant alias names serving and the trainer agree on, and which tenant names fit an alias."""

import pytest

from liverl.contracts import names


@pytest.mark.parametrize("tenant", ["acme", "a", "team-7", "0", "x" * 40])
def test_a_valid_tenant_gets_its_own_champion_and_candidate_alias(tenant):
    assert names.tenant_champion_alias(tenant) == f"champion-{tenant}"
    assert names.tenant_candidate_alias(tenant) == f"candidate-{tenant}"


@pytest.mark.parametrize("tenant", ["", "Acme", "a_b", "a/b", "a.b", "a b", "x" * 41, "ünï", None, 7])
def test_a_name_unfit_for_an_alias_is_refused_with_the_rule(tenant):
    with pytest.raises(ValueError, match="lowercase letters, digits or '-'"):
        names.tenant_champion_alias(tenant)
