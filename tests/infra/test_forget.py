"""`liverl forget` refuses every request that does not name exactly one known subject, changing nothing, and
says what it will erase first (all of --dry-run). The erasure itself, black-box on the real stack, is
tests/e2e/test_erasure.py."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.commands import forget as forget_command
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.subject import SubjectRefused
from tests.conftest import stack_config

DAVE, ERIN = "dave@example.com", "erin-22"


@pytest.fixture
def config(tmp_path):
    """A data directory whose key store knows dave (tenant acme, two sessions) and erin (tenant globex)."""
    config = stack_config(tmp_path)
    store = FileKeyStore(config.privacy.keys_dir)
    pseudonyms = Pseudonyms(store)
    for tenant, user, sessions in (("acme", DAVE, ["conv-1", "conv-2"]), ("globex", ERIN, ["conv-9"])):
        subjects = [pseudonyms.session(tenant, s) for s in sessions]
        store.create_many(tenant, subjects, [(pseudonyms.user(tenant, user), s) for s in subjects])
    return config


def key_store_bytes(config) -> dict[str, bytes]:
    root = Path(config.privacy.keys_dir)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_forget(config, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    forget_command.add_arguments(parser)
    return forget_command.run(config, parser.parse_args(list(argv)))


@pytest.mark.parametrize("argv", [
    ["--tenant", "acme", "--user", ""],  # an unset shell variable: once, this erased every user of acme
    ["--tenant", "acme", "--user", "   "],
    ["--tenant", "globex", "--session", ""],
    ["--tenant", "acme", "--user", "*"],
    ["--tenant", "acme", "--session", "*"],
    ["--tenant", "acme", "--user", "dave%"],
    ["--tenant", "*", "--user", DAVE],
    ["--tenant", "", "--all"],
    ["--tenant", "acme/x", "--all"],
    ["--tenant", "acme", "--user", "nobody@example.com"],  # unknown
    ["--tenant", "globex", "--user", DAVE],  # dave's id under the other tenant
    ["--tenant", "acme", "--session", "conv-404"],  # unknown session
    ["--tenant", "initech", "--all"],  # unknown tenant
])
def test_a_request_that_names_no_single_known_subject_is_refused_and_changes_nothing(config, argv, capsys):
    before = key_store_bytes(config)
    assert run_forget(config, *argv) == 2
    error = capsys.readouterr().err
    assert "refused, nothing was erased" in error and DAVE not in error.replace(repr(DAVE), "")
    assert key_store_bytes(config) == before  # no key destroyed, no tombstone, no tenant made
    assert not Path(config.privacy.audit_log).exists()


def test_the_function_refuses_as_the_command_does(config):
    with pytest.raises(SubjectRefused, match="empty"):
        forget_command.forget(config, "acme", user="")
    with pytest.raises(SubjectRefused, match="exactly one"):
        forget_command.forget(config, "acme")  # a tenant alone no longer means the whole tenant
    with pytest.raises(SubjectRefused, match="exactly one"):
        forget_command.forget(config, "acme", user=DAVE, whole_tenant=True)


def test_a_dry_run_says_what_would_be_erased_and_changes_nothing(config, capsys):
    before = key_store_bytes(config)
    assert run_forget(config, "--tenant", "acme", "--user", DAVE, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "erasing user u-" in out and "2 sessions linked" in out and "dry run: nothing changed" in out
    assert DAVE not in out  # the user is named by the pseudonym only
    assert key_store_bytes(config) == before
    assert not Path(config.privacy.audit_log).exists()


def test_an_unknown_subject_may_be_planned_as_an_opt_out_on_purpose(config, capsys):
    assert run_forget(config, "--tenant", "acme", "--user", "new-42", "--allow-unknown", "--dry-run") == 0
    assert "not known here: recording the opt-out only" in capsys.readouterr().out


def test_the_cli_refuses_with_exit_code_2(config):
    """As a script calls it: argparse refuses a tenant alone, and the command refuses an empty user."""
    from demo.stage_env import config_environment

    env = {**os.environ, **config_environment(config)}
    for argv, says in ((["--tenant", "acme"], "one of the arguments --user --session --all is required"),
                       (["--tenant", "acme", "--user", ""], "--user is empty")):
        done = subprocess.run([sys.executable, "-m", "liverl.cli", "forget", *argv], capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == 2 and says in done.stderr, (done.returncode, done.stderr)


def test_an_id_that_holds_a_pattern_character_as_sent_is_erasable_when_said_literally(config, capsys):
    store = FileKeyStore(config.privacy.keys_dir)
    pseudonyms = Pseudonyms(store)
    subject = pseudonyms.session("acme", "conv-50%")
    store.create_many("acme", [subject], [(pseudonyms.user("acme", "a*b@example.com"), subject)])
    assert run_forget(config, "--tenant", "acme", "--user", "a*b@example.com", "--dry-run") == 2
    assert "add --literal" in capsys.readouterr().err
    assert run_forget(config, "--tenant", "acme", "--user", "a*b@example.com", "--literal", "--dry-run") == 0
    assert "1 sessions linked" in capsys.readouterr().out
