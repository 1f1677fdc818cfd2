"""Redaction of personal data and secrets, shared by every stage that writes what users sent (ingest's
events and dead letters, serving's model-call records, the trace export). Read by liverl.redaction."""

from pydantic import Field, field_validator

from liverl.config.section import Section

DETECTORS = ["private_key", "jwt", "api_key", "bearer_token", "env_secret", "email", "iban", "card", "national_id",
             "phone"]


class TenantRedaction(Section):
    """One tenant's changes to the global redaction settings; unset fields keep the global value."""

    enabled: bool | None = None
    """Turn redaction off for this tenant only (its product guarantees no personal data)."""
    builtin: list[str] | None = None
    """This tenant's built-in detectors instead of the global list."""
    custom_patterns: dict[str, str] = {}
    """Extra name -> RE2 pattern for this tenant, added to the global custom patterns."""
    max_field_chars: int | None = Field(None, ge=1)
    """This tenant's cap on one string field."""
    phone_region: str | None = None
    """This tenant's default region for phone numbers written without a country code."""


class RedactionConfig(Section):
    """What is masked in every string of a message before anything reaches Kafka or a trace."""

    enabled: bool = True
    """Turn redaction off only where the product already guarantees no personal data is sent."""
    builtin: list[str] = list(DETECTORS)
    """Built-in detectors to apply (liverl.redaction.DETECTORS names them all, in the order they run)."""
    custom_patterns: dict[str, str] = {}
    """name -> RE2 regular expression (linear time: no lookaround or backreferences); each match becomes
    "[REDACTED:<name>]"."""
    max_field_chars: int = Field(64 * 1024, ge=1)
    """Longer strings are cut here with a "[TRUNCATED:<n> chars]" marker (counted as "truncated"), so one
    field cannot make redaction, or anything downstream, arbitrarily slow."""
    phone_region: str = "US"
    """ISO region used to read phone numbers written without a country code (e.g. "4155550134")."""
    pseudonym_salt: str | None = None
    """Gone: setting it is an error. Id fields (session id, call id, ...) that hold personal data are replaced
    by an HMAC under the tenant's own pseudonym key in the key store (privacy.keys_dir), which `liverl forget
    --tenant T --all` destroys; a salt shared by every tenant and kept in config could be used to test guesses."""
    tenants: dict[str, TenantRedaction] = {}
    """tenant id -> its overrides."""

    @field_validator("pseudonym_salt")
    @classmethod
    def _salt_is_gone(cls, value: str | None) -> None:
        if value is not None:
            raise ValueError("ingest.redaction.pseudonym_salt is no longer used: ids that hold personal data are "
                             "pseudonymised with each tenant's key from the key store (privacy.keys_dir), destroyed "
                             "by `liverl forget --tenant T --all`. Remove the setting (and "
                             "LIVERL_INGEST__REDACTION__PSEUDONYM_SALT) from your config and environment.")
        return None
