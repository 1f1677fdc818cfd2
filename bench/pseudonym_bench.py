"""Cost of the tenant key check in liverl.privacy.pseudonyms: a cached pseudonym with the check (the default
once a millisecond, and a stat on every call) against the same lookup never checked, side by side in one run.

    .venv/bin/python bench/pseudonym_bench.py [--calls 200000] [--rounds 5]

Prints medians of per-call times and the ratios to the unchecked baseline (this machine is noisy: quote ratios).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    from liverl.privacy.keystore import FileKeyStore
    from liverl.privacy.pseudonyms import RECHECK_S, Pseudonyms

    with tempfile.TemporaryDirectory() as folder:
        cases = {"unchecked": float("inf"), "default": RECHECK_S, "every call": 0.0}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):  # the cases interleaved in every round, so load hits them alike
            for name, recheck_s in cases.items():
                pseudonyms = Pseudonyms(FileKeyStore(Path(folder)), recheck_s=recheck_s)
                pseudonyms.session("acme", "conv-1")
                seconds = timeit.timeit(lambda: pseudonyms.session("acme", "conv-1"), number=args.calls)
                times[name].append(seconds / args.calls)
    base = statistics.median(times["unchecked"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>10}: {median * 1e6:.2f} us per cached pseudonym, {median / base:.2f}x unchecked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
