"""`python -m demo.evaluate gate|heldout|power ARGS`: one entry point for the measures (demo/evaluate/__init__.py)."""

import sys

MEASURES = ("gate", "heldout", "power")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in MEASURES:
        print(f"usage: python -m demo.evaluate {{{','.join(MEASURES)}}} ARGS (--help after one for its ARGS)",
              file=sys.stderr)
        return 2
    if argv[0] == "gate":
        from demo.evaluate.paired_reward import main as measure
    elif argv[0] == "heldout":
        from demo.evaluate.heldout_success import main as measure
    else:
        from demo.evaluate.power import main as measure
    return measure(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
