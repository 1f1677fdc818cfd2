"""Checks that turn a pattern's candidate into a finding: a match that fails its check is a look-alike
(an order id, a timestamp, a version string) and is left alone."""

from __future__ import annotations

from functools import cache

# Card networks by leading digits (Visa, Mastercard, Amex, Diners, JCB, Discover, UnionPay, Maestro):
# 13-19 Luhn-valid digits that start elsewhere (a millisecond timestamp starts with 1) are not cards.
CARD_PREFIXES = ("4", "51", "52", "53", "54", "55", "34", "37", "300", "301", "302", "303", "304", "305", "36",
                 "38", "35", "6011", "64", "65", "62", "50", "56", "57", "58", "67")


def digits_of(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def is_card(candidate: str) -> bool:
    from stdnum import luhn

    digits = digits_of(candidate)
    if not 13 <= len(digits) <= 19:
        return False
    if not (digits.startswith(CARD_PREFIXES) or 2221 <= int(digits[:4]) <= 2720):
        return False
    return luhn.is_valid(digits)


def is_iban(candidate: str) -> bool:
    from stdnum import iban

    return iban.is_valid(candidate)


def _national_checks():
    from stdnum.br import cpf
    from stdnum.es import dni, nie
    from stdnum.fr import nir
    from stdnum.in_ import aadhaar
    from stdnum.it import codicefiscale
    from stdnum.us import ssn

    return {"us_ssn": ssn.is_valid, "es_dni": dni.is_valid, "es_nie": nie.is_valid, "fr_nir": nir.is_valid,
            "it_codice_fiscale": codicefiscale.is_valid, "br_cpf": cpf.is_valid, "in_aadhaar": aadhaar.is_valid}


@cache
def national_check(kind: str):
    return _national_checks()[kind]


def is_phone(candidate: str, region: str) -> bool:
    """A valid number for its region (or its +country code); a span with extra digits around a phone
    (a number list, a reference next to it) is searched with phonenumbers' own matcher."""
    import phonenumbers

    try:
        if phonenumbers.is_valid_number(phonenumbers.parse(candidate, region)):
            return True
    except phonenumbers.NumberParseException:
        pass
    # candidates are at most a few dozen characters, so the matcher's cost stays bounded
    return any(True for _ in phonenumbers.PhoneNumberMatcher(candidate, region, max_tries=8))
