"""A long-lived Pseudonyms (capture's, serving's) follows the key store: after `liverl forget --tenant T --all` in
another process, its calls use the tenant's new key within RECHECK_S, so one id never keeps two pseudonyms; the
check costs at most one stat per call."""

from __future__ import annotations

import time

from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import RECHECK_S, Pseudonyms


def _all_of(pseudonyms: Pseudonyms, tenant: str) -> tuple[str, str, str]:
    return (pseudonyms.user(tenant, "dave@example.com"), pseudonyms.session(tenant, "conv-1"),
            pseudonyms.redacted_id(tenant, "email", "conv-dave@example.com"))


def test_a_running_pseudonyms_sees_a_forget_tenant_done_by_another_process(tmp_path):
    running = Pseudonyms(FileKeyStore(tmp_path))
    before = _all_of(running, "acme")
    kept = _all_of(running, "globex")
    assert _all_of(running, "acme") == before  # cached, and still the store's key

    FileKeyStore(tmp_path).forget_tenant("acme")  # another process's store: this one's caches know nothing of it
    time.sleep(2 * RECHECK_S)
    after = _all_of(running, "acme")
    assert all(new != old for new, old in zip(after, before))  # every cached pseudonym of acme was dropped
    assert after == _all_of(Pseudonyms(FileKeyStore(tmp_path)), "acme")  # the new key: what a new process makes
    assert _all_of(running, "globex") == kept  # other tenants are untouched


def test_a_new_key_file_has_a_new_version_even_on_the_same_inode(tmp_path):
    store = FileKeyStore(tmp_path)
    versions = []
    for _ in range(5):  # forgotten and remade at once: the freed inode may well be reused
        store.pseudonym_key("acme")
        versions.append(store.pseudonym_key_version("acme"))
        store.forget_tenant("acme")
        assert store.pseudonym_key_version("acme") is None
    assert len(set(versions)) == len(versions)


def test_with_a_check_on_every_call_the_next_call_already_uses_the_new_key(tmp_path):
    running = Pseudonyms(FileKeyStore(tmp_path), recheck_s=0)
    before = running.session("acme", "conv-1")
    FileKeyStore(tmp_path).forget_tenant("acme")
    assert running.session("acme", "conv-1") != before

