"""API keys: open when none are configured, admin keys for admin operations."""

from serving.auth import Keys


def test_no_keys_means_open():
    keys = Keys([], [])
    assert keys.allows_use(None) and keys.allows_admin(None)


def test_user_keys_do_not_open_admin():
    keys = Keys(["u1"], ["a1"])
    assert keys.allows_use("Bearer u1") and keys.allows_use("bearer a1")
    assert not keys.allows_use("Bearer nope") and not keys.allows_use(None) and not keys.allows_use("u1")
    assert keys.allows_admin("Bearer a1") and not keys.allows_admin("Bearer u1")


def test_user_keys_without_admin_keys_close_admin():
    keys = Keys(["u1"], [])
    assert keys.allows_use("Bearer u1") and not keys.allows_admin("Bearer u1")
