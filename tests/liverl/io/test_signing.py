"""Signed weights: only the trainer's key signs, and any change to files, verdict or version breaks the check."""

import pytest

from liverl.io.signing import SignatureMismatch, SignedStatement, folder_digest, generate_key_pair, sign, verify


@pytest.fixture
def keys(tmp_path):
    private, public = tmp_path / "keys" / "signing.pem", tmp_path / "keys" / "verify.pem"
    generate_key_pair(private, public)
    return private, public


def _policy(folder, weights=b"weights"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text("{}")
    return folder


def test_a_signed_passing_version_verifies(tmp_path, keys):
    private, public = keys
    statement = SignedStatement("policy", "3", folder_digest(_policy(tmp_path / "v3")), "pass")
    verify(statement, sign(statement, private), public)
    assert oct(private.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("change", ["files", "version", "decision", "signature", "other key", "missing"])
def test_any_change_is_refused(tmp_path, keys, change):
    private, public = keys
    folder = _policy(tmp_path / "v3")
    statement = SignedStatement("policy", "3", folder_digest(folder), "pass")
    signature = sign(statement, private)
    if change == "files":
        (folder / "model.safetensors").write_bytes(b"weights of somebody else")
        statement = SignedStatement("policy", "3", folder_digest(folder), "pass")
    elif change == "version":
        statement = SignedStatement("policy", "4", statement.files_digest, "pass")
    elif change == "decision":
        statement = SignedStatement("policy", "3", statement.files_digest, "fail")
        signature = sign(statement, private)  # even signed, a failed verdict is never served
    elif change == "signature":
        signature = "A" * len(signature)
    elif change == "other key":
        generate_key_pair(tmp_path / "other.pem", tmp_path / "other.pub")
        signature = sign(statement, tmp_path / "other.pem")
    elif change == "missing":
        signature = None
    with pytest.raises(SignatureMismatch):
        verify(statement, signature, public)


def test_the_digest_covers_names_and_nested_files(tmp_path):
    a = _policy(tmp_path / "a")
    b = _policy(tmp_path / "b")
    assert folder_digest(a) == folder_digest(b)
    (b / "model.safetensors").rename(b / "other.safetensors")
    assert folder_digest(a) != folder_digest(b)
    (a / "nested").mkdir()
    (a / "nested" / "x").write_text("1")
    assert folder_digest(a) != folder_digest(_policy(tmp_path / "c"))
