"""Bearer parsing and the constant-time secret table both edges use."""

import pytest

from liverl.access.bearer import SecretTable, bearer_secret


@pytest.mark.parametrize("header, secret", [
    ("Bearer s3cret", "s3cret"), ("bearer  s3cret ", "s3cret"), ("BEARER s3cret", "s3cret"),
    (None, None), ("", None), ("Bearer", None), ("Bearer   ", None), ("Basic s3cret", None), ("s3cret", None),
])
def test_bearer_secret_reads_only_the_bearer_scheme(header, secret):
    assert bearer_secret(header) == secret


def test_a_secret_names_its_owner_and_nothing_else_matches():
    table = SecretTable([("acme-token", "acme"), ("globex-token", "globex")])
    assert table.owner_of("acme-token") == "acme" and table.owner_of("globex-token") == "globex"
    assert table.owner_of("acme-toke") is None  # a prefix is not the secret
    assert table.owner_of("acme-token-x") is None
    assert table.owner_of("") is None and table.owner_of(None) is None
    assert len(table) == 2 and len(SecretTable([])) == 0


def test_the_first_entry_wins_a_duplicated_secret():
    assert SecretTable([("k", "first"), ("k", "second")]).owner_of("k") == "first"
