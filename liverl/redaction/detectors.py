"""The built-in detectors: an RE2 pattern (linear time whatever the input) and, where a pattern alone
would catch look-alikes, a check of the candidate (Luhn, mod-97, national checksums, phone metadata).

Run in DETECTORS order (liverl.config.redaction): the most specific first, so a JWT is not half-eaten by
the token rules and an IBAN's digits are not taken for a card or a phone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from liverl.redaction import validators


@dataclass(frozen=True)
class Detector:
    name: str
    pattern: str  # RE2 syntax
    check: Callable[[str, str], bool] | None = None  # (candidate, phone region) -> is it really one
    bounded: bool = False
    """Every quantifier is bounded (at most a few dozen characters per start) and unambiguous, so Python's
    `re` is linear on it too, and much faster than RE2's Python wrapper per match: used for the number
    detectors, whose candidates are many in digit-dense text. Such a pattern may use lookarounds."""
    prefilter: str | None = None
    """An RE2 pattern matching wherever `pattern` can (a looser one), for any_finding_pattern when `pattern`
    uses what RE2 lacks (lookarounds); None: `pattern` itself."""
    around: Callable[[str, int, int], bool] | None = None
    """(text, start, end) -> whether the match is really one, judged by what surrounds it."""


def _national(kind: str, pattern: str) -> Detector:
    return Detector("national_id", pattern, lambda candidate, region: validators.national_check(kind)(candidate),
                    bounded=True)


# An AWS secret access key: 40 base64 characters standing alone; validators.is_aws_secret tells it from
# other 40-character tokens (hex digests, identifiers, paths) by its context or its randomness.
AWS_SECRET = r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
# Its prefilter leaves out the commonest 40-character token, a lowercase hex digest (a git commit): at least
# one character outside [0-9a-f], at any of the 40 places, so a text full of commit ids is not walked.
AWS_SECRET_PREFILTER = r"(?:^|[^A-Za-z0-9/+=])(?:" + "|".join(
    f"[A-Za-z0-9/+]{{{k}}}[A-Zg-z/+][A-Za-z0-9/+]{{{39 - k}}}" for k in range(40)) + r")(?:$|[^A-Za-z0-9/+=])"

# What names nine bare digits an SSN: "SSN: ...", "ssn is ...", "social security number was ...".
SSN_NAMED = r"(?i:\b(?:ssn|social security(?: number| no\.?)?)(?:\s{1,3}(?:is|was))?\s{0,3}[#:=]?\s{0,3})"

BUILTIN: dict[str, list[Detector]] = {
    "private_key": [Detector("private_key", r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?"
                                            r"-----END [A-Z ]{0,40}PRIVATE KEY-----")],
    "jwt": [Detector("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")],
    "api_key": [Detector("api_key", r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
                                    r"|gh[pousr]_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})"),
                Detector("api_key", AWS_SECRET, bounded=True, prefilter=AWS_SECRET_PREFILTER,
                         around=validators.is_aws_secret)],
    # "[" is not in the token's class, so an already redacted token is never matched again.
    "bearer_token": [Detector("bearer_token", r"(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")],
    # NAME=value / NAME: value where NAME says secret; the name stays, the value goes (see redactor).
    "env_secret": [Detector("env_secret", r"\b(?P<name>(?i:[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY"
                                          r"|PRIVATE_?KEY|CREDENTIALS?|ACCESS_?KEY)[A-Z0-9_]*))"
                                          r"(?P<sep>[\"']?\s*[=:]\s*)(?P<quote>[\"']?)(?P<value>[^\s\"',;]+)")],
    # "%40": an address inside a URL's query or path, written URL-encoded.
    "email": [Detector("email", r"\b[A-Za-z0-9._%+-]+(?:@|%40)[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")],
    # Either case: people paste IBANs lowercased; the check reads them uppercased.
    "iban": [Detector("iban", r"\b[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,4})?\b",
                      lambda candidate, region: validators.is_iban(candidate.upper()), bounded=True)],
    # Not inside a longer digit run, but glued to letters too ("card4111..."), except inside a hex token
    # (a hash or uuid holds digit runs by chance).
    "card": [Detector("card", r"(?<![0-9])\d(?:[ -]?\d){12,18}(?![0-9])",
                      lambda candidate, region: validators.is_card(candidate), bounded=True,
                      prefilter=r"\d(?:[ -]?\d){12,18}", around=validators.outside_hex_token)],
    "national_id": [
        _national("us_ssn", r"\b\d{3}[- ]\d{2}[- ]\d{4}\b"),
        # Nine bare digits are an SSN only where the text says so: order numbers look the same.
        Detector("national_id", SSN_NAMED + r"(?P<value>\d{9})\b",
                 lambda candidate, region: validators.national_check("us_ssn")(candidate), bounded=True,
                 prefilter=SSN_NAMED + r"\d{9}\b"),
        _national("es_dni", r"\b\d{8}-?[A-Za-z]\b"),
        _national("es_nie", r"\b[XYZxyz]-?\d{7}-?[A-Za-z]\b"),
        _national("it_codice_fiscale", r"\b[A-Za-z]{6}\d{2}[A-Za-z]\d{2}[A-Za-z]\d{3}[A-Za-z]\b"),
        _national("br_cpf", r"\b\d{3}\.\d{3}\.\d{3}-\d{2}\b"),
        _national("in_aadhaar", r"\b\d{4} \d{4} \d{4}\b"),
        _national("fr_nir", r"\b[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[ABab]) ?\d{3} ?\d{3} ?\d{2}\b"),
    ],
    # A bounded span of digits with the separators people write; the check decides (phonenumbers).
    "phone": [Detector("phone", r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d(?:[ .-]?\d){5,14}",
                       lambda candidate, region: validators.is_phone(candidate, region), bounded=True)],
}

# A cheap first pass over a whole string: no hit, no detector runs (most text has none of these).
TRIGGER = (r"(?i:\d\d|@|%40|bearer|eyj|-----begin|sk[-_]|akia|xox|aiza|gh[pousr]_|secret|token|passw|key|credential"
           r"|ssn|social security)|[A-Za-z0-9/+]{40}")


def any_finding_pattern(names: list[str]) -> str:
    """One RE2 alternation that matches wherever any of the named detectors could change a text, so text
    it does not match is returned unchanged after a single scan instead of one scan per detector.

    Exactness: a detector changes text only at a match of its own pattern, so the alternation of all
    patterns matches whenever one of them would (a text no detector matched is still the original when the
    next detector runs). Named groups are made plain (names must be unique in one pattern). A phone match
    is only ever kept when it stands alone (the redactor's `_standalone`), so the phone alternative also
    asks for a non-token character (or the edge of the text) on each side: looser than `_standalone`
    (which also refuses Unicode letters and ".5"-style tails), never stricter, and it stops the digit runs
    inside hex ids (uuids, hashes) from making every id look like a phone candidate."""
    alternatives = []
    for name in names:
        for detector in BUILTIN[name]:
            pattern = re.sub(r"\(\?P<\w+>", "(?:", detector.prefilter or detector.pattern)
            if detector.name == "phone":
                pattern = rf"(?:^|[^A-Za-z0-9+_/.\-])(?:{pattern})(?:$|[^A-Za-z0-9_/])"
            alternatives.append(f"(?:{pattern})")
    return "|".join(alternatives)


@cache
def compiled_bounded(pattern: str):
    """A bounded pattern (Detector.bounded) for Python's `re`; ASCII digits and word characters, as RE2."""
    return re.compile(pattern, re.ASCII)


@cache
def compiled(pattern: str):
    """An RE2 pattern compiled once; raises ValueError when RE2 cannot compile it."""
    import re2

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        raise ValueError(f"{error}; redaction patterns use RE2 syntax (no lookaround or backreferences)") from None
