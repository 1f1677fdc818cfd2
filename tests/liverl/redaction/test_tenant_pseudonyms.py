"""Ids that hold personal data get the tenant's keyed pseudonym: unrelated across tenants, not the old shared
salt's HMAC, and gone with the tenant's key (`liverl forget --tenant T --all`)."""

from __future__ import annotations

import hashlib
import hmac
import time

from liverl.config import LiverlConfig
from liverl.privacy import key_store, tenant_redactor
from liverl.privacy.pseudonyms import RECHECK_S
from liverl.redaction import Redactor, ids_as_given
from liverl.v1 import session_event_pb2

SESSION = "conv-dave@example.com"  # an id holding an email: pseudonymised, not masked


def _config(tmp_path) -> LiverlConfig:
    config = LiverlConfig()
    config.privacy.keys_dir = tmp_path / "keys"
    return config


def _old_salted(value: str, kind: str) -> str:
    """What the removed ingest.redaction.pseudonym_salt (shipped as "liverl") made: anyone could recompute it."""
    return f"redacted-{kind}-{hmac.new(b'liverl', value.encode(), hashlib.sha256).hexdigest()[:20]}"


def test_two_tenants_equal_ids_get_unrelated_pseudonyms_that_nobody_can_recompute(tmp_path):
    config = _config(tmp_path)
    acme, globex = tenant_redactor(config, "acme"), tenant_redactor(config, "globex")
    ours, theirs = acme.redact_id(SESSION), globex.redact_id(SESSION)
    assert ours.startswith("redacted-email-") and theirs.startswith("redacted-email-") and ours != theirs
    assert ours[len("redacted-email-"):] not in theirs  # no shared part: the whole digest is keyed per tenant
    assert ours != _old_salted(SESSION, "email") and "dave" not in ours
    assert tenant_redactor(_config(tmp_path), "acme").redact_id(SESSION) == ours  # every stage: the same one
    event = session_event_pb2.SessionEvent(session_id=SESSION, tenant_id="acme")
    acme.redact_message(event)
    assert event.session_id == ours  # redact_message and redact_id agree
    assert acme.redact_id("conv-42") == "conv-42"  # an id without personal data is kept


def test_after_forget_tenant_a_running_redactor_gives_the_new_keys_pseudonym(tmp_path):
    config = _config(tmp_path)
    running = tenant_redactor(config, "acme")  # a capture or serving process, alive across the erasure
    before = running.redact_id(SESSION)
    key_store(config).forget_tenant("acme")  # `liverl forget --tenant acme --all`, from another process
    time.sleep(2 * RECHECK_S)  # how long a running process may still use the key it checked last
    after = running.redact_id(SESSION)
    assert after != before and after.startswith("redacted-email-")
    assert tenant_redactor(_config(tmp_path), "acme").redact_id(SESSION) == after  # a new process agrees


def test_the_redaction_key_is_read_only_when_an_id_needs_it(tmp_path):
    config = _config(tmp_path)
    tenant_redactor(config, "acme").redact_text(f"mail {SESSION}")
    assert not (tmp_path / "keys").exists()  # text alone (traces, log lines) makes no tenant key


def test_without_a_tenant_key_ids_are_never_under_a_guessable_pseudonym():
    logged = Redactor().redact_id(SESSION)  # log lines: a random key of this process
    assert logged.startswith("redacted-email-") and logged != _old_salted(SESSION, "email")
    assert Redactor().redact_id(SESSION) == logged  # stable within the process
    spooled = session_event_pb2.SessionEvent(session_id=SESSION)
    spooled.user_message.text = "mail dave@example.com"
    Redactor(pseudonym=ids_as_given).redact_message(spooled)  # the SDK's spool: the service keys its ids
    assert spooled.session_id == SESSION and spooled.user_message.text == "mail [REDACTED:email]"
