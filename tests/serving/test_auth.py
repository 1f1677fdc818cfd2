"""API keys and tenancy: a key fixes its tenant, headers only narrow; open serving stays on loopback."""

import pytest

from liverl.config.serving import ApiKeyGrant
from serving.auth import OPEN, Forbidden, Keys, is_loopback, refuse_open_exposure

GRANTS = {"acme-key": ApiKeyGrant(tenant="acme"), "globex-sub": ApiKeyGrant(tenant="globex", roles=["subagent"])}


def test_no_keys_means_open_and_headers_decide():
    keys = Keys({}, [], "demo")
    principal = keys.principal(None)
    assert keys.open and principal.key_id == OPEN and keys.admin(None) is not None
    assert principal.tenant_for("acme", "demo") == "acme" and principal.tenant_for(None, "demo") == "demo"


def test_a_key_acts_as_its_tenant_and_a_header_cannot_change_it():
    keys = Keys(GRANTS, ["admin-key"], "ops")
    acme = keys.principal("Bearer acme-key")
    assert acme.tenant_for(None, "ops") == "acme" == acme.tenant_for("acme", "ops")
    with pytest.raises(Forbidden) as other:
        acme.tenant_for("globex", "ops")
    assert other.value.reason == "cross-tenant"
    assert keys.principal("bearer admin-key").tenant_for(None, "ops") == "ops"


def test_user_keys_do_not_open_admin_and_wrong_keys_open_nothing():
    keys = Keys(GRANTS, ["admin-key"], "ops")
    assert keys.admin("Bearer admin-key") is not None and keys.admin("Bearer acme-key") is None
    for wrong in (None, "", "Bearer nope", "acme-key", "Basic acme-key", "Bearer "):
        assert keys.principal(wrong) is None
    assert Keys(GRANTS, [], "ops").admin("Bearer acme-key") is None


def test_roles_narrow_what_a_key_may_claim():
    sub = Keys(GRANTS, [], "ops").principal("Bearer globex-sub")
    assert sub.check_role("subagent") == "subagent" and sub.check_role("") == "subagent"
    with pytest.raises(Forbidden) as claimed:
        sub.check_role("orchestrator")
    assert claimed.value.reason == "forbidden-role"


def test_empty_keys_are_refused_at_start():
    with pytest.raises(ValueError, match="empty key"):
        Keys({}, [""], "ops")


def test_serving_refuses_to_start_open_beyond_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("serving.internal")
    refuse_open_exposure("127.0.0.1", Keys({}, [], "demo"), allow_open=False)
    refuse_open_exposure("0.0.0.0", Keys(GRANTS, [], "demo"), allow_open=False)
    refuse_open_exposure("0.0.0.0", Keys({}, [], "demo"), allow_open=True)
    with pytest.raises(ValueError, match="allow_open"):
        refuse_open_exposure("0.0.0.0", Keys({}, [], "demo"), allow_open=False)
