"""OptOut: the one rule every entry asks (ingest.opt_out_tenants / opt_out_users)."""

from liverl.access.opt_out import OptOut
from liverl.config.ingest import IngestConfig


def test_tenants_and_users_of_a_tenant_are_excluded_and_no_one_else():
    rule = OptOut.of(IngestConfig(opt_out_tenants=["globex"], opt_out_users={"acme": ["u1"], "initech": []}))
    assert rule.excludes("globex") and rule.excludes("globex", "anyone")
    assert rule.excludes("acme", "u1") and not rule.excludes("acme", "u2") and not rule.excludes("acme")
    assert not rule.user("initech", "u1") and not rule.user("acme", "")  # "" names no user
    assert rule and not OptOut()


def test_a_user_is_still_found_by_their_pseudonym():
    rule = OptOut(users={"acme": ["dave@example.com"]}).with_pseudonyms(lambda user: f"p-{user}")
    assert rule.user("acme", "dave@example.com") and rule.user("acme", "p-dave@example.com")
    assert not rule.user("acme", "p-someone")
