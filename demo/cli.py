"""`liverl demo`: run the whole loop on the embedded stack with the demo agent product."""


def add_arguments(parser) -> None:
    parser.add_argument("--minutes", type=float, help="traffic duration (default: demo.duration_s)")
    parser.add_argument("--keep-stack", action="store_true", help="leave the broker and MLflow running afterwards")


def config_schema():
    from demo.config import DemoLiverlConfig

    return DemoLiverlConfig


def run(config, args) -> int:
    from demo.run import run_demo

    if args.minutes is not None:
        config.demo.duration_s = args.minutes * 60
    if args.keep_stack:
        config.demo.run.keep_stack = True
    result = run_demo(config, say=lambda line: print(line, flush=True))
    print(f"liverl demo: {'the served reward rose' if result.verdict.rose else 'the served reward did not rise'}; "
          f"champion v{result.champion}; report in {result.report_dir}")
    return 0
