"""`liverl demo`: run the whole loop on the embedded stack with the demo agent product."""

import argparse
from pathlib import Path

MAX_TENANTS = 3  # the tenants demo/product/preferences.py defines (brisk, careful, frugal)


def tenant_count(text: str) -> int:
    """--tenants: a whole number from 1 to MAX_TENANTS, refused with the range otherwise."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of tenants from 1 to {MAX_TENANTS}, got {text!r}")
    if not 1 <= count <= MAX_TENANTS:
        raise argparse.ArgumentTypeError(f"the demo defines {MAX_TENANTS} tenants (brisk, careful, frugal): "
                                         f"choose 1 to {MAX_TENANTS}, got {count}")
    return count


def add_arguments(parser) -> None:
    parser.add_argument("--minutes", type=float, help="traffic duration (default: demo.duration_s)")
    parser.add_argument("--keep-stack", action="store_true", help="leave the broker and MLflow running afterwards")
    parser.add_argument("--tenants", type=tenant_count, metavar="N",
                        help=f"N tenants (1-{MAX_TENANTS}) whose users want different things, an adapter each, "
                             "compared with the shared policy on their own traffic (reads configs/demo-tenants.toml "
                             "unless another file is named)")


def config_schema():
    from demo.config import DemoLiverlConfig

    return DemoLiverlConfig


def default_config_file(args) -> Path:
    """Without '@ file': the demo's own settings, configs/demo.toml (the toy loop at a demo's pace: the production
    defaults hold each session an hour for late feedback, so none would close within the run); with --tenants,
    configs/demo-tenants.toml (the toy loop with the LoRA adapters the tenants need)."""
    return Path(__file__).resolve().parents[1] / "configs" / ("demo-tenants.toml" if args.tenants else "demo.toml")


def run(config, args) -> int:
    from demo.run import run_demo

    if args.minutes is not None:
        config.demo.duration_s = args.minutes * 60
    if args.keep_stack:
        config.demo.run.keep_stack = True
    if args.tenants:
        config.demo.tenants.count = args.tenants
    from pipelines.pending import impossible_within

    if problem := impossible_within(config.demo.duration_s, config.pipelines):
        print(f"liverl demo: warning: {problem}", flush=True)
    result = run_demo(config, say=lambda line: print(line, flush=True))
    print(f"liverl demo: {result.verdict.headline()}; "
          f"champion v{result.champion}; report in {result.report_dir}")
    if result.heldout is not None and (verdict := result.heldout.verdict()):
        print(f"liverl demo: {verdict}")
    if result.heldout_error is not None:  # the last word must not read as if the gain had been measured
        print(f"liverl demo: no held-out evidence of a gain: the held-out evaluation failed ({result.heldout_error})")
    if result.heldout is not None and (promotions := result.heldout.promotions_verdict()):
        print(f"liverl demo: held-out, {promotions}")
    if result.tenants:
        ahead = [c.tenant for c in result.tenants if (i := c.interval()) and i[0] > 0]
        print(f"liverl demo: own adapter shown ahead of the shared policy (95 % interval above 0) for "
              f"{len(ahead)} of {len(result.tenants)} tenants{': ' + ', '.join(ahead) if ahead else ''}")
    return 0
