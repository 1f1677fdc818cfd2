"""Privacy at rest: the subject key store, keyed pseudonyms, sealing of record values, of the trajectory table's
token ids and of the distiller's staged trace sources (ciphers cached per process, checked against the key store
on every use: liverl.privacy.ciphers), and erasure.

Redactors of a tenant's records pseudonymise ids under the same per-tenant key (tenant_redactor).
Built from the config by the stages that write (capture, serving, import) and read (the pipelines,
`liverl topics`) records, and by the trainer, which opens table rows (liverl.privacy.row_sealing);
`liverl forget` erases a subject everywhere (infra/commands/forget.py).
"""

from __future__ import annotations


def key_store(config):
    """The configured subject key store (the embedded file store under privacy.keys_dir)."""
    from liverl.privacy.keystore import FileKeyStore

    return FileKeyStore(config.privacy.keys_dir)


def tenant_redactor(config, tenant: str, pseudonyms=None):
    """The liverl.redaction.Redactor of one tenant's records: config.ingest.redaction with the tenant's overrides,
    and an id (a join key) that holds personal data replaced by its keyed pseudonym under the tenant's key in the
    key store (liverl.privacy.pseudonyms), the same in every stage and gone with `liverl forget --tenant T --all`.
    pseudonyms: the process's Pseudonyms to share (one is made otherwise). The key is read on first need only."""
    from functools import partial

    from liverl.privacy.pseudonyms import Pseudonyms
    from liverl.redaction import Redactor

    pseudonyms = pseudonyms or Pseudonyms(key_store(config), config.privacy.key_cache_size)
    return Redactor(config.ingest.redaction, tenant, pseudonym=partial(pseudonyms.redacted_id, tenant))


def sealer_for(config, pseudonyms=None):
    """A Sealer for the config's key store, or None when privacy.encrypt_payloads is off. pseudonyms: the
    process's liverl.privacy.pseudonyms.Pseudonyms to share (one is made otherwise)."""
    if not config.privacy.encrypt_payloads:
        return None
    from liverl.privacy.sealing import Sealer

    store = pseudonyms.store if pseudonyms is not None else key_store(config)
    return Sealer(store, pseudonyms, cache_size=config.privacy.key_cache_size)


def opener_for(config):
    """An Opener for the config's key store (readers open sealed values whatever encrypt_payloads says)."""
    from liverl.privacy.sealing import Opener

    return Opener(key_store(config), cache_size=config.privacy.key_cache_size)


def row_opener_for(config):
    """A RowOpener for the config's key store (the trainer opens sealed rows whatever encrypt_payloads says)."""
    from liverl.privacy.row_sealing import RowOpener

    return RowOpener(key_store(config), cache_size=config.privacy.key_cache_size)
