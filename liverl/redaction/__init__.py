"""Redaction of personal data and secrets, shared by every stage that stores what users sent.

    from liverl.privacy import tenant_redactor
    redactor = tenant_redactor(config, "acme")                    # ingest.redaction, acme's overrides and key
    clean = redactor.redact_text("mail bob@example.com")          # "mail [REDACTED:email]"
    counts = redactor.redact_message(event)                       # in place; Counter({"email": 1, ...})
    blob, counts = redactor.redact_bytes(raw)                     # best effort over bytes that did not parse

Guarantees:
- Linear time: every pattern is RE2 (google-re2), and each string is first cut to
  `max_field_chars` (marker "[TRUNCATED:<n> chars]", counted as "truncated").
- Validated detectors, so look-alikes stay: cards need a card network prefix and Luhn, IBANs their
  mod-97 check, national ids their checksum (python-stdnum), phones must be valid numbers for their
  region (phonenumbers); plus emails, private keys, JWTs, API keys, bearer tokens and NAME=secret pairs.
- `redact_message` walks every string field, repeated field, map key and map value of a protobuf
  message and discards unknown fields (they could carry anything). Id fields (ID_FIELDS: join keys)
  that hold personal data are replaced by "redacted-<kind>-<hex>", an HMAC under the tenant's pseudonym key
  from the key store (liverl.privacy.tenant_redactor): the same in every stage, so joins still work, unrelated
  across tenants, untestable without the key, and meaningless once `liverl forget --tenant T --all` destroyed
  it. `Redactor(config)` without a key (log lines, text of no tenant) uses a random key of the process.

Config: liverl.config.redaction.RedactionConfig (re-exported by liverl.config.ingest).
"""

from liverl.config.redaction import DETECTORS, RedactionConfig
from liverl.redaction.redactor import ID_FIELDS, IdPseudonym, Redactor, ids_as_given, process_pseudonym

__all__ = ["DETECTORS", "ID_FIELDS", "IdPseudonym", "RedactionConfig", "Redactor", "ids_as_given",
           "process_pseudonym"]
