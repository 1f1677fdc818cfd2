"""Checks that turn a pattern's candidate into a finding: a match that fails its check is a look-alike
(an order id, a timestamp, a version string) and is left alone."""

from __future__ import annotations

from functools import cache, lru_cache

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

    return {"us_ssn": lambda value: ssn.is_valid(digits_of(value)),  # written with dashes, spaces or neither
            "es_dni": dni.is_valid, "es_nie": nie.is_valid, "fr_nir": nir.is_valid,
            "it_codice_fiscale": codicefiscale.is_valid, "br_cpf": cpf.is_valid, "in_aadhaar": aadhaar.is_valid}


@cache
def national_check(kind: str):
    return _national_checks()[kind]


NANP_REGIONS = frozenset({"US", "CA", "AG", "AI", "AS", "BB", "BM", "BS", "DM", "DO", "GD", "GU", "JM", "KN", "KY",
                          "LC", "MP", "MS", "PR", "SX", "TC", "TT", "VC", "VG", "VI"})


def is_nanp(digits: str) -> bool:
    """North American Numbering Plan: [2-9]XX [2-9]XX XXXX, with an optional leading 1. The rule every
    NANP region shares, so a Canadian number counts under region US (phonenumbers would need one
    metadata check per region for that, which is what made dense digit text slow)."""
    if len(digits) == 11 and digits[0] == "1":
        digits = digits[1:]
    return len(digits) == 10 and digits[0] >= "2" and digits[3] >= "2"


@lru_cache(maxsize=8192)
def is_phone(candidate: str, region: str) -> bool:
    """A valid number for its region (or its +country code). Written with separators, its digit groups
    must look like a phone's (two to five groups, the last of three or four digits, none over four), so
    a date and a time ("2024-01-02 12") or a card's blocks are not one; phonenumbers decides the rest."""
    import phonenumbers

    if not candidate.lstrip("+").isdigit():
        groups = "".join(c if c.isdigit() else " " for c in candidate).split()
        if not 2 <= len(groups) <= 5 or len(groups[-1]) not in (3, 4) or max(map(len, groups)) > 4:
            return False
    digits = digits_of(candidate)
    international = candidate.startswith("+")
    if (international and digits.startswith("1")) or (not international and region in NANP_REGIONS):
        return is_nanp(digits if not international else digits)
    try:
        number = phonenumbers.parse(candidate, region)
    except phonenumbers.NumberParseException:
        return False
    home = phonenumbers.region_code_for_country_code(number.country_code)
    return phonenumbers.is_valid_number_for_region(number, home)


HEX = frozenset("0123456789abcdefABCDEF")
AWS_CONTEXT = ("aws", "secret", "access_key", "accesskey", "access key", "credential")


def _token_around(text: str, start: int, end: int, extra: str = "") -> str:
    """The run of letters and digits (and `extra`) that holds text[start:end]."""
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in extra):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] in extra):
        end += 1
    return text[start:end]


def outside_hex_token(text: str, start: int, end: int) -> bool:
    """False when the match lies in a hexadecimal token of 20 or more characters (a digest, a uuid part)."""
    token = _token_around(text, start, end)
    return not (len(token) >= 20 and all(c in HEX for c in token))


def _entropy(text: str) -> float:
    from collections import Counter
    from math import log2

    return -sum(n / len(text) * log2(n / len(text)) for n in Counter(text).values())


def _longest_same_case_run(text: str) -> int:
    longest = run = 0
    previous = ""
    for c in text:
        case = "l" if c.islower() else "u" if c.isupper() else ""
        run = run + 1 if case and case == previous else (1 if case else 0)
        previous = case
        longest = max(longest, run)
    return longest


def is_aws_secret(text: str, start: int, end: int) -> bool:
    """A 40-character base64 token that is an AWS secret key: named so just before it (aws, secret, ...)
    and not a hex digest; or, without such context, as random as a generated key is (entropy over 4.3
    bits a character, at least two digits, two capitals and two small letters, no word-like run of more
    than eight letters of one case): identifiers, paths and digests are not."""
    candidate = text[start:end]
    if all(c in HEX for c in candidate) or "//" in candidate:
        return False
    before = text[max(0, start - 40):start].lower()
    if any(word in before for word in AWS_CONTEXT):
        return _entropy(candidate) >= 3.5
    digits = sum(c.isdigit() for c in candidate)
    upper = sum(c.isupper() for c in candidate)
    lower = sum(c.islower() for c in candidate)
    return (digits >= 2 and upper >= 2 and lower >= 2 and candidate.count("/") <= 3
            and _longest_same_case_run(candidate) <= 8 and _entropy(candidate) >= 4.3)
