"""Redaction ReDoS benchmark: worst-case crafted inputs through the old capture-service regexes (Python
`re`, the baseline) and through liverl.redaction (RE2 + validated detectors), in seconds per MB.

    .venv/bin/python bench/redaction_bench.py [--baseline-kb 8] [--kb 1024]

The old regexes are quadratic on some inputs, so the baseline runs on a small input (--baseline-kb) and is
extrapolated per MB linearly, which flatters it: its real cost per MB at 1 MB is far higher. The new
redactor runs on the same small input and on --kb (field cap lifted so the whole input is scanned),
which shows it stays linear. Prints one line per input and the worst case; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The patterns ingest/redaction.py used before liverl.redaction replaced it, verbatim.
OLD_PATTERNS = {
    "private_key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    "api_key": r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
               r"|gh[pousr]_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})",
    "bearer_token": r"(?i:\bbearer\s+)(?!\[REDACTED)[A-Za-z0-9._~+/=-]{8,}",
    "env_secret": r"\b(?P<name>(?i:[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIALS?"
                  r"|ACCESS_?KEY)[A-Z0-9_]*))(?P<sep>[\"']?\s*[=:]\s*)(?P<quote>[\"']?)(?!\[REDACTED)"
                  r"(?P<value>[^\s\"',;]+)",
    "email": r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
    "phone": r"(?<![\w+])(?:\+\d{1,3}[\s.-]?\d{1,4}(?:[\s.-]?\d{2,4}){2,3}|(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4})"
             r"(?![\w])",
}

# name -> a unit repeated to the wanted size: each aims at one pattern's worst case.
CRAFTED = {
    "email_dots": "a.",                      # [A-Za-z0-9._%+-]+ then [A-Za-z0-9.-]+\. : backtracking per start
    "email_ats": "a@",
    "env_secret_names": "API_KEY",           # [A-Z0-9_]* around the keyword: cubic on one long name
    "secret_words": "secret_token_",
    "phone_digits": "1 ",
    "phone_plus": "+1 12 ",
    "bearer": "bearer ",
    "private_key_open": "-----BEGIN PRIVATE KEY-----x",
    "card_digits": "4111 ",
    "pii_dense": "bob@example.com 4155550134 4111 1111 1111 1111 ",
    "random_phones": "(4##) ###-#### ",      # distinct candidates, each checked by phonenumbers
    "random_cards": "4### #### #### #### ",
    "random_ids": "###-##-#### #### #### #### ",
    "plain_text": "the quick brown fox jumps over the lazy dog ",
}


def crafted(unit: str, size: int) -> str:
    """unit repeated to size; "#" becomes a random digit, so caches of checked candidates do not help."""
    text = (unit * (size // len(unit) + 1))[:size]
    if "#" not in unit:
        return text
    rng = random.Random(size)
    return "".join(str(rng.randrange(10)) if c == "#" else c for c in text)


def old_redact(compiled: list, text: str) -> str:
    for pattern in compiled:
        text = pattern.sub("[REDACTED]", text)
    return text


def timed(run, text: str, repeats: int = 1) -> float:
    """The best of `repeats` runs (the machine is shared: the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run(text)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-kb", type=int, default=8, help="input size for the old regexes")
    parser.add_argument("--kb", type=int, default=1024, help="input size for the new redactor")
    args = parser.parse_args(argv)

    from liverl.config.redaction import RedactionConfig
    from liverl.redaction import Redactor

    old = [re.compile(p) for p in OLD_PATTERNS.values()]
    new = Redactor(RedactionConfig(max_field_chars=1 << 30))
    small, large = args.baseline_kb * 1024, args.kb * 1024
    for unit in CRAFTED.values():  # warm up: detector imports, phone metadata, compiled patterns
        new.redact_text(crafted(unit, 4096), Counter())
    print(f"{'input':<18} {'old s/MB @' + str(args.baseline_kb) + 'KB':>16} {'new s/MB @' + str(args.baseline_kb) + 'KB':>16}"
          f" {'new s/MB @' + str(args.kb) + 'KB':>17} {'old/new':>9}")
    worst_old, worst_new = 0.0, 0.0
    for name, unit in CRAFTED.items():
        old_s = timed(lambda t: old_redact(old, t), crafted(unit, small)) / small * 2**20
        new_small = timed(lambda t: new.redact_text(t, Counter()), crafted(unit, small), repeats=3) / small * 2**20
        new_large = timed(lambda t: new.redact_text(t, Counter()), crafted(unit, large)) / large * 2**20
        worst_old, worst_new = max(worst_old, old_s), max(worst_new, new_large, new_small)
        print(f"{name:<18} {old_s:>16.3f} {new_small:>16.3f} {new_large:>17.3f} {old_s / max(new_small, 1e-9):>8.1f}x",
              flush=True)
    print(f"worst case: old {worst_old:.2f} s/MB (extrapolated from {args.baseline_kb} KB; quadratic, so worse at "
          f"1 MB) | new {worst_new:.2f} s/MB | ratio {worst_old / worst_new:.1f}x")


if __name__ == "__main__":
    main()
