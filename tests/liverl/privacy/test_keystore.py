"""The embedded subject key store: 0600 files, one key per subject across processes, forgetting for good."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest

from liverl.privacy.keystore import FileKeyStore, SubjectForgotten
from liverl.privacy.pseudonyms import Pseudonyms

CREATE = "import sys; from liverl.privacy.keystore import FileKeyStore; " \
         "sys.stdout.write(FileKeyStore(sys.argv[1]).create('acme', 's-' + 'a' * 32).hex())"


def test_keys_are_private_files_and_one_per_subject_even_across_processes(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    workers = [subprocess.Popen([sys.executable, "-c", CREATE, str(tmp_path / "keys")], stdout=subprocess.PIPE)
               for _ in range(3)]
    keys = {bytes.fromhex(worker.communicate(timeout=60)[0].decode()) for worker in workers}
    assert keys == {store.key("acme", "s-" + "a" * 32)} and len(next(iter(keys))) == 32
    files = [p for p in (tmp_path / "keys").rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    folders = [p for p in (tmp_path / "keys").rglob("*") if p.is_dir()]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in folders)


def test_a_forgotten_subject_loses_its_key_and_never_gets_another(tmp_path):
    store = FileKeyStore(tmp_path)
    pseudonyms = Pseudonyms(store)
    session = pseudonyms.session("acme", "conv-1")
    user = pseudonyms.user("acme", "dave@example.com")
    store.create("acme", session)
    store.link("acme", user, session)
    assert store.subjects_of("acme", user) == [session]
    assert store.forget("acme", store.subjects_of("acme", user), user) == 1
    assert store.key("acme", session) is None
    with pytest.raises(SubjectForgotten):
        store.create("acme", session)
    assert {session, user} <= store.forgotten("acme")
    assert store.subjects_of("acme", user) == []
    other = pseudonyms.session("acme", "conv-2")
    assert store.create("acme", other) == store.key("acme", other)  # others are untouched


def test_pseudonyms_are_keyed_per_tenant_and_stable(tmp_path):
    store = FileKeyStore(tmp_path)
    first, again = Pseudonyms(store), Pseudonyms(FileKeyStore(tmp_path))
    assert first.user("acme", "dave@example.com") == again.user("acme", "dave@example.com")
    assert first.user("acme", "dave@example.com") != first.user("globex", "dave@example.com")
    assert first.user("acme", "dave@example.com").startswith("u-") and "dave" not in first.user("acme", "dave@example.com")
    assert first.user("acme", first.user("acme", "x")) == first.user("acme", "x")  # pseudonymising twice: the same
    assert first.user("acme", "") == ""


def test_forgetting_a_tenant_destroys_all_its_keys(tmp_path):
    store = FileKeyStore(tmp_path)
    pseudonyms = Pseudonyms(store)
    for session in ("a", "b"):
        store.create("acme", pseudonyms.session("acme", session))
    kept = store.create("globex", Pseudonyms(store).session("globex", "a"))
    assert store.forget_tenant("acme") == 2
    assert not (tmp_path / "acme".encode().hex()).exists()
    assert store.key("globex", Pseudonyms(store).session("globex", "a")) == kept


def test_ids_that_are_not_pseudonyms_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a subject or user pseudonym"):
        FileKeyStore(tmp_path).create("acme", "../../etc/passwd")


def test_forgetting_leaves_no_copy_of_the_key_in_the_store(tmp_path):
    store = FileKeyStore(tmp_path)
    pseudonyms = Pseudonyms(store)
    doomed, kept = pseudonyms.session("acme", "conv-1"), pseudonyms.session("acme", "conv-2")
    user = pseudonyms.user("acme", "dave")
    keys = store.create_many("acme", [doomed, kept], links=[(user, doomed)])
    reader = FileKeyStore(tmp_path)  # another process's view, read before the erasure
    assert reader.key("acme", doomed) == keys[doomed]
    store.forget("acme", store.subjects_of("acme", user), user)
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert keys[doomed].hex().encode() not in stored and keys[kept].hex().encode() in stored
    assert FileKeyStore(tmp_path).key("acme", doomed) is None and reader.key("acme", kept) == keys[kept]
    assert user.encode() in stored  # as a tombstone only
    assert store.subjects_of("acme", user) == []
